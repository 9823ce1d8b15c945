#!/usr/bin/env bash
# Prepare, on a machine with network, the wheel folder that tools/gpu/check.sh installs rollart from on a
# GPU machine without network (Python 3.12, a CUDA torch already there).
#
#   tools/gpu/wheels.sh wheels            # rollart + what the GPU machine lacks (~30 MB): carry it there
#   tools/gpu/wheels.sh --full wheels     # also what it already has (transformers, scipy, ...): for a bare
#                                         # Python that has torch and nothing else
#
# PYTHON (default python3) builds the wheels; it needs pip, setuptools and torch (DeepSpeed's setup imports
# torch; DS_BUILD_OPS=0 makes a pure-Python DeepSpeed wheel). PYVER (default 3.12) is the target Python.
# Binary wheels are manylinux x86_64 for that Python; nothing is installed here.
set -euo pipefail
FULL=0
if [[ "${1:-}" == "--full" ]]; then FULL=1; shift; fi
DIR=${1:?usage: tools/gpu/wheels.sh [--full] DIR}
PY=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$DIR"
TARGET=(--python-version "$PYVER" --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64
        --only-binary=:all: --dest "$DIR")

# what the GPU machine lacks (see the README's GPU section): the actor wire, gymnasium, DeepSpeed's
# dependencies, pytest-asyncio for the tests, matplotlib for the benchmark plot, pyyaml
MISSING=(pyzmq==27.3.0 gymnasium==1.4.0 farama-notifications cloudpickle
         hjson pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection typing-extensions
         einops ninja py-cpuinfo psutil tqdm packaging pytest-asyncio pyyaml
         matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six tzdata)
# what it has besides torch (--full)
PRESENT=(transformers==5.17.0 tokenizers safetensors numpy scipy aiohttp msgpack tensorboard pytest
         pytest-timeout pytest-xdist)

echo "1) rollart wheel" >&2
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$DIR" "$ROOT"
echo "2) wheels the GPU machine lacks (Python $PYVER, manylinux x86_64, no dependencies)" >&2
"$PY" -m pip download --quiet --no-deps "${TARGET[@]}" "${MISSING[@]}"
echo "3) DeepSpeed (no wheel on PyPI: built pure-Python, DS_BUILD_OPS=0)" >&2
DS_BUILD_OPS=0 "$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$DIR" deepspeed==0.19.8
if [[ $FULL == 1 ]]; then
  echo "4) --full: what the GPU machine already has, with their dependencies" >&2
  "$PY" -m pip download --quiet "${TARGET[@]}" "${PRESENT[@]}"
fi
ls "$DIR"/*.whl | wc -l | xargs echo "wheels:" >&2
du -sh "$DIR" >&2
