"""Covers one-line errors from real commands: a bad model path (and no run folder left behind), a machine where
no sandbox isolates, and config mistakes in a plain-API script like the README's own-env example."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            **extra}


def _run(argv, **env):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=_env(**env), capture_output=True, text=True,
                          timeout=120)


def _one_line(proc) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.strip().splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_missing_model_is_one_line_and_leaves_no_run_folder(tmp_path):
    proc = _run(["-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", f"model={tmp_path / 'nope'}"])
    assert f"model='{tmp_path / 'nope'}' is not a folder" in _one_line(proc)
    assert list(tmp_path.iterdir()) == []
    proc = _run(["-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", "trainer.model_path=/nonexistent"])
    assert "trainer.model_path is derived from model; set that instead" in _one_line(proc)


def test_no_working_sandbox_is_one_line_before_anything_starts(tmp_path):
    """PATH without bwrap and unshare: the HumanEval recipe refuses at once, naming how to get isolation."""
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _run(["-m", "recipes.grpo_humaneval", f"logdir={tmp_path}"], PATH=str(empty))
    line = _one_line(proc)
    assert "sandbox.mode=auto: no isolation works here" in line and "sandbox.mode=rlimit" in line
    assert not (tmp_path / "grpo_humaneval").exists()


def test_plain_api_script_shows_config_errors_as_one_line(tmp_path):
    """The README's own-env script runs under exit_on_config_error(); importing rollart alone installs nothing."""
    script = tmp_path / "train_echo.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio
        import sys
        from rollart.config import exit_on_config_error
        from rollart.pipeline import Coordinator, PipelineConfig
        from rollart.rollout.env_manager import TaskSpec
        from rollart.trainer import TrainerConfig

        task = TaskSpec(name="Lake", env_id="FrozenLake-v1")
        with exit_on_config_error():
            if sys.argv[1] == "model_path":
                cfg = PipelineConfig(logdir={str(tmp_path)!r}, trainer=TrainerConfig(model_path="/nonexistent"))
            else:
                cfg = PipelineConfig(logdir={str(tmp_path)!r}, total_steps=0)
            print(asyncio.run(Coordinator(cfg, [task]).run()).final_success)
    """))
    assert "total_steps=0 must be >= 1" in _one_line(_run([str(script), "total_steps"]))
    line = _one_line(_run([str(script), "model_path"]))
    assert "trainer.model_path='/nonexistent' would be replaced by" in line and "derived from model" in line
    assert [p.name for p in tmp_path.iterdir()] == ["train_echo.py"]
    proc = _run([str(script), "total_steps"], ROLLART_TRACEBACK="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr  # the traceback, for whoever debugs it
    assert "ConfigError: total_steps=0 must be >= 1" in proc.stderr


def test_a_recipe_mistake_shows_its_traceback_with_rollart_traceback(tmp_path):
    proc = _run(["-m", "recipes.grpo_frozenlake", f"logdir={tmp_path}", "mode=fast"], ROLLART_TRACEBACK="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "ConfigError: mode='fast': expected one of" in proc.stderr
