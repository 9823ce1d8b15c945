"""Covers the recipes' command lines: --help, and user mistakes failing fast with one-line errors."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import grpo_frozenlake, grpo_humaneval, grpo_multitask, grpo_smollm2, grpo_swe, multiplex_two_jobs

ROOT = Path(__file__).resolve().parents[2]
RECIPES = [grpo_frozenlake, grpo_multitask, grpo_swe, grpo_humaneval, grpo_smollm2, multiplex_two_jobs]


def run_main(monkeypatch, module, *argv):
    """Call ``module.main()`` with ``argv``; return the SystemExit it must raise before any training starts."""
    monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
    with pytest.raises(SystemExit) as e:
        module.main()
    return e.value


@pytest.mark.parametrize("module", RECIPES, ids=lambda m: m.__name__.split(".")[-1])
def test_help_lists_every_setting_with_its_doc(monkeypatch, capsys, module):
    assert run_main(monkeypatch, module, "--help").code == 0
    out = capsys.readouterr().out
    assert "total_steps = " in out and "    # " in out.split("total_steps = ")[1].splitlines()[0], out[:500]
    assert "logdir = " in out
    assert out.startswith(module.__doc__.strip().splitlines()[0])  # what the recipe does and how to run it


def test_multitask_help_names_the_tasks_option(monkeypatch, capsys):
    run_main(monkeypatch, grpo_multitask, "--help")
    assert "tasks = 'FrozenLake,GuessNumber'    # comma-separated subset of FrozenLake, MathTool, GuessNumber" \
        in capsys.readouterr().out


@pytest.mark.parametrize("module,argv,message", [
    (grpo_frozenlake, ["totl_steps=2"],
     "error: unknown setting 'totl_steps' for PipelineConfig; did you mean total_steps?"),
    (grpo_frozenlake, ["alpha=abc"], "error: alpha='abc': expected int"),
    (grpo_frozenlake, ["proxy.hw_affinity={\"FrozenLake\": \"A100\"}"],
     "error: proxy.hw_affinity['FrozenLake']='A100': no inference worker has that class"),
    (grpo_frozenlake, ["proxy.hw_affinity={\"Frozen\": \"H20\"}"], "routes no worker for task(s) ['FrozenLake']"),
    (grpo_multitask, ["proxy.hw_affinity={\"FrozenLake\": \"H800\"}"], "routes no worker for task(s) ['GuessNumber']"),
    (grpo_multitask, ["hw_affinity={\"FrozenLake\": \"H800\"}"], "routes no worker for task(s) ['GuessNumber']"),
    (grpo_frozenlake, ["buffer.capacity=8"],
     "error: buffer.capacity is derived from alpha and rollout.max_concurrency"),
    (grpo_swe, ["engine.backend=vlm"], "error: engine.backend='vlm': choose one of ['torch', 'vllm']"),
    (grpo_swe, ["tasks=/nonexistent/swebench.jsonl", "repos_root=/tmp"],
     "cannot load the SWE tasks: [Errno 2] No such file or directory: '/nonexistent/swebench.jsonl'"),
    (grpo_swe, ["tasks=/nonexistent/swebench.jsonl"], "is a JSONL file: set repos_root to its snapshots"),
    (grpo_smollm2, ["task=math"], "error: task='math': expected one of ['sort', 'guess']"),
    (multiplex_two_jobs, ["policy=lifo"], "error: policy='lifo': expected one of ['hrrs', 'fcfs']"),
    (multiplex_two_jobs, ["total_steps=0"], "error: total_steps=0 must be >= 1"),
    (multiplex_two_jobs, ["evals=-1"], "error: evals=-1 must be >= 0"),
    (multiplex_two_jobs, ["simulate_hardware=true"], "error: simulate_hardware=true needs share=trainer"),
    (multiplex_two_jobs, ["pair=lake+lake+lake"], "error: pair='lake+lake+lake': expected one of"),
    (multiplex_two_jobs, ["share=trainer", "switch_s=-1"], "switch_s >= 0 (-1.0)"),
])
def test_mistakes_exit_with_a_message_naming_them(monkeypatch, tmp_path, module, argv, message):
    err = run_main(monkeypatch, module, f"logdir={tmp_path}", *argv)
    assert isinstance(err.code, str) and message in err.code, err.code
    assert not any(tmp_path.iterdir()), "failed before creating the run folder or starting any process"


def test_multitask_drops_default_routes_of_tasks_left_out():
    tasks, _ = grpo_multitask.select_tasks(["tasks=GuessNumber"])
    cfg = grpo_multitask.route_chosen(grpo_multitask.default_config(), tasks)
    assert cfg.proxy.hw_affinity == {"default": "H20"}
    given = grpo_multitask.default_config()
    given.proxy.hw_affinity = {"GuessNumber": "H800"}
    assert grpo_multitask.route_chosen(given, tasks).proxy.hw_affinity == {"GuessNumber": "H800"}


def test_old_keys_still_parse_and_help_shows_the_new_ones(monkeypatch, capsys, caplog):
    from rollart.config import parse_overrides
    cfg = parse_overrides(grpo_multitask.default_config(), ["group_size=4", "hw_spill_ratio=2",
                                                            "worker_classes=H20,H800", "engine.kv_cache_memory_gb=0.5"])
    assert (cfg.rollout.group_size, cfg.proxy.spill_ratio, cfg.hw_classes, cfg.engine.kv_cache_memory_gb) == \
        (4, 2.0, ("H20", "H800"), 0.5)
    assert "group_size is renamed rollout.group_size" in caplog.text
    run_main(monkeypatch, grpo_frozenlake, "--help")
    out = capsys.readouterr().out
    assert "  rollout.group_size = 16" in out and "  proxy.hw_affinity = {}" in out and "  hw_classes = " in out
    assert "group_size -> rollout.group_size" in out


def test_a_mistake_prints_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", "mode=fast"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: mode='fast': expected one of ['async', 'areal', 'oneoff', 'sync']"


def test_smollm2_names_the_extra_before_downloading(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if gguf were not installed: import raises ImportError
    # accelerate may be missing too (CI installs only the test extra): the message names whatever is missing
    with pytest.raises(SystemExit, match=r"needs gguf( and accelerate)?: pip install -e '\.\[smollm2\]'"):
        grpo_smollm2.smollm2_folder(tmp_path / "empty-cache")
    assert not any(tmp_path.iterdir())  # nothing downloaded


def test_swe_names_its_extra_before_starting_when_pytest_is_missing(monkeypatch, tmp_path):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else find_spec(name, *a))
    err = run_main(monkeypatch, grpo_swe, f"logdir={tmp_path}")
    assert err.code.startswith("error: the SWE env runs the repositories' tests with pytest") and \
        err.code.endswith('pip install -e ".[swe]" (or pip install pytest)'), err.code
    assert not any(tmp_path.iterdir())
