#!/usr/bin/env bash
# Triton 2.51's one-core figures on a lent machine, for cores.py's "vs Triton x N" there: a second call,
# since Triton's wheel and Naiad's do not fit in one (device_pack.sh --triton fills .device-triton/;
# carry [".device-triton", ".device/bin", ".device/lib", ".device/reference"]). Triton pinned to core 1
# with the reference add_sub (Python backend), wrk and h2load on the cores from 2 on, 16 connections,
# as cores.py loads one worker core; prints "HTTP,gRPC" for cores.py --triton-one-core.
#
# usage: bash benchmarks/scaling/device_triton.sh [seconds of HTTP load, default 5]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
SECONDS_OF_LOAD=${1:-5}
SITE=/tmp/triton-site
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .device-triton/*.whl
T=$SITE/pytriton/tritonserver
PYV=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
cp -f "$T/python_backend_stubs/$PYV/triton_python_backend_stub" "$T/backends/python/"
export PATH=$PWD/.device/bin:$(dirname "$(command -v "$PYTHON")"):$PATH
# the stub embeds the interpreter: its libpython, where the Python that runs it keeps it
LIBDIR=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
export LD_LIBRARY_PATH=$SITE/nvidia_pytriton.libs:$LIBDIR:$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LOAD=2-$(($(nproc) - 1))
[ "$(nproc)" -gt 2 ] || LOAD=0  # (a 2-core machine: the load shares core 0)
taskset -c 1 "$T/bin/tritonserver" --model-repository="$PWD/.device/reference/models" --backend-directory="$T/backends" \
  --cache-directory="$T/caches" --http-port=18000 --grpc-port=18001 --metrics-port=18002 >/tmp/triton.log 2>&1 &
triton=$!
trap 'kill $triton 2>/dev/null; wait $triton 2>/dev/null' EXIT
ready() {
  "$PYTHON" -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:18000/v2/health/ready", timeout=1)' \
    2>/dev/null
}
for _ in $(seq 120); do ready && break; sleep 0.5; done
ready || { echo "Triton is not ready; its log:" >&2; tail -20 /tmp/triton.log >&2; exit 1; }
URL=http://127.0.0.1:18000/v2/models/add_sub/infer
GRPC=http://127.0.0.1:18001/inference.GRPCInferenceService/ModelInfer
BODY=.device/reference/add_sub.bin
H2=(-c 16 -m 1 -d "$BODY" -H "content-type: application/grpc" -H "te: trailers")
taskset -c "$LOAD" wrk -t4 -c16 -d2s -s .device/reference/add_sub.lua "$URL" >/dev/null
http=$(taskset -c "$LOAD" wrk -t4 -c16 -d"${SECONDS_OF_LOAD}s" -s .device/reference/add_sub.lua "$URL" | awk '/^Requests\/sec/ { print $2 }')
taskset -c "$LOAD" h2load -t4 -n 2000 "${H2[@]}" "$GRPC" >/dev/null
grpc=$(taskset -c "$LOAD" h2load -t4 -n 40000 "${H2[@]}" "$GRPC" | awk '/^finished in/ { print $4 }')
echo "Triton 2.51, one core (core 1): HTTP $http req/s, gRPC $grpc calls/s"
echo "--triton-one-core $http,$grpc"
