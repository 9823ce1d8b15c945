#!/usr/bin/env bash
# Check rollart on a GPU machine, offline: install it from a wheel folder, run the cuda-marked tests, the GPU
# benchmark and the quickstart on CUDA; every log goes into DIR.
#
#   tools/gpu/check.sh DIR [WHEELS]          # WHEELS: made by tools/gpu/wheels.sh (default: ./wheels)
#   tools/gpu/check.sh --dry-run DIR [WHEELS]  # without a GPU: the install path, the (skipping) cuda tests,
#                                              # the benchmark's skipped=no_cuda and 2 quickstart steps on CPU
#
# Run it from a rollart checkout (the tests and recipes come from it; rollart itself from the wheel). It
# makes DIR/venv with --system-site-packages, so the machine's own CUDA torch is used and never replaced:
# every wheel is installed with --no-deps, and only for packages this Python does not have yet. PYTHON
# (default python3) is the machine's Python. QUICKSTART_ARGS adds overrides to the quickstart (e.g.
# "total_steps=20"); ONLY="cuda_tests bench" runs only the stages named (after the install), and CUDA_TESTS_ARGS
# adds pytest arguments. Exit status: 0 when every stage passed; DIR/summary.txt says which did not.
set -uo pipefail
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
DIR=${1:?usage: tools/gpu/check.sh [--dry-run] DIR [WHEELS]}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WHEELS=$(cd "${2:-$ROOT/wheels}" && pwd) || { echo "error: no wheel folder ${2:-$ROOT/wheels}: make it with tools/gpu/wheels.sh" >&2; exit 2; }
PY=${PYTHON:-python3}
mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd)
SUMMARY="$DIR/summary.txt"
: > "$SUMMARY"
unset PYTHONPATH
export HF_HUB_OFFLINE=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

stage() {  # stage NAME LOG CMD...: run, log, record pass/fail
  local name=$1 log=$2; shift 2
  if [[ -n "${ONLY:-}" && $name != install && " $ONLY " != *" $name "* ]]; then
    echo "$name: not run (ONLY=$ONLY)" | tee -a "$SUMMARY"; return 0
  fi
  echo "== $name (log: $log)"
  "$@" > "$log" 2>&1
  local rc=$?
  tail -n 5 "$log"
  echo "$name: $([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)")" | tee -a "$SUMMARY"
  return $rc
}

# 1) the machine
{ date -u; "$PY" --version; nvidia-smi 2>&1 || echo "no nvidia-smi";
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(),
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"; } > "$DIR/machine.txt" 2>&1
cat "$DIR/machine.txt" | tail -n 2

# 2) a venv over the machine's packages; add what is missing, then rollart
install() (  # a subshell: set -e and cd stay inside
  set -e
  "$PY" -m venv --system-site-packages "$DIR/venv"
  V="$DIR/venv/bin/python"
  # when PY is itself a venv (the GPU image's python3 is), --system-site-packages reaches the Python under it,
  # not PY's packages: a .pth file puts PY's site-packages after the new venv's own
  "$PY" -c "import site; print('\n'.join(site.getsitepackages()))" \
    > "$("$V" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_machine_packages.pth"
  local before; before=$("$V" -c "import torch; print(torch.__version__)")
  local missing=()
  for whl in "$WHEELS"/*.whl; do
    local dist; dist=$(basename "$whl" | cut -d- -f1)
    [[ $dist == rollart ]] && continue
    "$V" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null || missing+=("$whl")
  done
  echo "installing ${#missing[@]} missing wheel(s):"; printf '  %s\n' "${missing[@]##*/}"
  [[ ${#missing[@]} == 0 ]] || "$V" -m pip install --progress-bar off --no-index --no-deps "${missing[@]}"
  "$V" -m pip install --progress-bar off --no-index --no-deps --force-reinstall "$WHEELS"/rollart-*.whl
  local after; after=$("$V" -c "import torch; print(torch.__version__)")
  [[ $before == "$after" ]] || { echo "error: torch changed from $before to $after"; return 1; }
  cd "$ROOT"  # tests and recipes from the checkout; rollart must come from the venv, not src/
  "$V" -c "import rollart, deepspeed, zmq, gymnasium; print('rollart from', rollart.__file__)" | tee /dev/stderr \
    | grep -q "$DIR/venv" || { echo "error: rollart was not imported from $DIR/venv"; return 1; }
  "$V" -m pip check || echo "(pip check lists pins the machine's own packages do not meet; --no-deps keeps them)"
)
stage install "$DIR/install.log" install || { echo "install failed: see $DIR/install.log"; exit 1; }
V="$DIR/venv/bin/python"
cd "$ROOT"
FAILED=0

# 3) the cuda-marked tests
# each stage has its own time limit (seconds; CUDA_TESTS_S, BENCH_S, QUICKSTART_S), so one hang loses one stage
stage cuda_tests "$DIR/cuda_tests.log" timeout -k 10 "${CUDA_TESTS_S:-150}" "$V" -m pytest -m cuda -q -rs -p no:cacheprovider ${CUDA_TESTS_ARGS:-} \
  --junitxml "$DIR/cuda_tests.xml" || FAILED=1

# 4) the GPU benchmark (its last line holds the figures; skipped=no_cuda without a GPU)
stage bench "$DIR/bench_gpu.log" timeout -k 10 "${BENCH_S:-200}" "$V" tools/bench/gpu.py --quick --plot "$DIR/gpu.png" || FAILED=1

# 5) the quickstart on CUDA (prints its memory plan, peak_gpu_memory_gb and final_success)
if [[ $DRY == 1 ]]; then
  QS=(device=cpu total_steps=2 warmup_steps=4 eval_episodes=1 "logdir=$DIR/runs")  # the stage runs, not the learning
else
  QS=(device=cuda "logdir=$DIR/runs")
fi
# shellcheck disable=SC2206
stage quickstart "$DIR/quickstart.log" timeout -k 10 "${QUICKSTART_S:-110}" "$V" -m recipes.grpo_frozenlake "${QS[@]}" ${QUICKSTART_ARGS:-} || FAILED=1

echo "== summary ($SUMMARY)"
cat "$SUMMARY"
grep -h "final_success=\|peak_gpu_memory_gb\|skipped=no_cuda\|trainer_vs_plain_torch=\|^memory plan\|^\[profile b=\|host ms a step" "$DIR"/bench_gpu.log "$DIR"/quickstart.log || true
exit $FAILED
