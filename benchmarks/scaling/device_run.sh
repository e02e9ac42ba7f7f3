#!/usr/bin/env bash
# Issue 15 (4) on a lent machine, in one call (see device_pack.sh, which fills .device/ here first):
# install the carried wheels beside the image's packages, put the carried wrk and h2load on the path,
# check that `naiad serve` starts with frontend workers, then run cores.py with 1/2/4/8/14 worker
# cores. Its table goes to $OUT/cores.md when $OUT is set.
#
# usage: bash benchmarks/scaling/device_run.sh [cores.py flags, e.g. --triton-one-core 9330,6435]
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/server PATH=$PWD/.device/bin:$PATH
export LD_LIBRARY_PATH=$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONUNBUFFERED=1
mkdir -p ../shared/reference
cp -rn .device/reference/. ../shared/reference/
"$PYTHON" --version
nproc
wrk --version | head -1 || true
h2load --version
"$PYTHON" -m naiad serve --help >/dev/null
"$PYTHON" benchmarks/scaling/cores.py --python "$PYTHON" "$@" | tee "${OUT:-/tmp}/cores.md"
