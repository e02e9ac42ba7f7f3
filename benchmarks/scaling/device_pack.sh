#!/usr/bin/env bash
# Gather what benchmarks/scaling/cores.py needs on a lent machine into .device/ (ignored by git), for
# the device tool's `carry`: the lent image has Python 3.12, no internet, no wrk or h2load, and few of
# `naiad serve`'s dependencies. Wheels are the image lock's versions (constraints/images.txt) of what
# `naiad serve` and the benchmark import and that image lacks; wrk and h2load come from this machine
# with the libraries the lent image has not. Then, on the lent machine (one `run`, carry [".device"]):
#
#   bash benchmarks/scaling/device_run.sh
#
# With --triton it fills .device-triton/ too, with Triton 2.51's wheel (nvidia-pytriton), for
# device_triton.sh in a second call (carry [".device-triton", ".device/bin", ".device/lib",
# ".device/reference"]: with Naiad's wheels it would not fit in one).
#
# usage: bash benchmarks/scaling/device_pack.sh [--triton]
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
rm -rf .device
mkdir -p .device/whl .device/bin .device/lib

# what `naiad serve` imports (with the frontend workers) beyond the lent image's packages
PACKAGES=(
  msgspec orjson uvicorn h11 click httptools
  grpcio grpcio-health-checking grpcio-status googleapis-common-protos protobuf
  tritonclient python-rapidjson
  pydantic-settings pydantic pydantic-core typing-inspection annotated-types python-dotenv
)
pins=()
for name in "${PACKAGES[@]}"; do
  pin=$(grep -i "^${name}==" constraints/images.txt) || { echo "not in constraints/images.txt: $name" >&2; exit 1; }
  pins+=("$pin")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .device/whl "${pins[@]}"

# the reference add_sub model and wrk's body: ../shared does not travel to the lent machine
mkdir -p .device/reference/models
cp -r ../shared/reference/models/add_sub .device/reference/models/
cp ../shared/reference/add_sub.lua .device/reference/
.venv/bin/python - <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, ".")
from benchmarks.grpc_infer.run import grpc_body
from benchmarks.scaling.run import add_sub_workload

grpc_body(add_sub_workload(1), Path(".device/reference/add_sub.bin"))
PY

cp "$(command -v wrk)" "$(command -v h2load)" .device/bin/
for lib in libev.so.4 libluajit-5.1.so.2 libnghttp2.so.14 libjemalloc.so.2; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')" .device/lib/
done
if [ "${1:-}" = "--triton" ]; then
  grep -qx '/.device-triton/' "$exclude" || echo '/.device-triton/' >>"$exclude"
  rm -rf .device-triton
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 -d .device-triton nvidia-pytriton==0.7.0
  du -sh .device-triton
fi
du -sh .device
