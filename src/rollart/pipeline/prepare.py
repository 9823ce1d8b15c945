"""The model folder a run trains: the user's (checked by preflight), or a tiny random-init model built once in
the run folder; and ``prepare_run``, what a run does before it starts any actor, for code that needs the same
resolved config without running (a shared trainer service, tests)."""
from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from rollart.config import ConfigError
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.run_plan import RunPlacement
from rollart.pipeline.emulated import apply_emulation
from rollart.pipeline.memory_plan import apply_memory_plan
from rollart.pipeline.preflight import check_model, preflight
from rollart.pipeline.resolve import resolve, with_pad_id
from rollart.pipeline.run_state import RunTasks
from rollart.rollout.env_manager import TaskSpec

log = logging.getLogger("rollart.pipeline")


class Prepared(NamedTuple):
    config: PipelineConfig
    """Resolved, the tokenizer's pad id included."""
    tokenizer: Any
    plan: Optional[RunPlacement]


def ensure_model(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> str:
    """The model folder to train: cfg.model (checked), or the tiny one built in the run folder (``build_tiny``).
    Takes a config resolved or not."""
    if _given(cfg):
        check_model(cfg)
        return cfg.model
    return build_tiny(cfg, tasks)


def build_tiny(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> str:
    """A tiny random-init model built once in the run folder (format-warmed on ``tasks`` when cfg.warmup_steps
    is set; built aside and moved in when complete, so an interrupted build is redone, not resumed from)."""
    out = cfg.tiny_model_dir()
    if not (out / "model.safetensors").exists():
        if cfg.warmup_steps and not tasks:
            raise ConfigError(f"warmup_steps={cfg.warmup_steps} needs the run's tasks to warm the model up on")
        from rollart.tools.make_tiny_model import make_tiny_model
        building = out.with_name(out.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        make_tiny_model(building, seed=cfg.seed)
        if cfg.warmup_steps:
            from rollart.tools.format_warmup import format_warmup
            if not cfg.quiet:
                print(f"format warm-up of the tiny model: {cfg.warmup_steps} supervised steps on transcripts of "
                      "random valid actions (the answer format and the rules, no policy) ...",
                      file=sys.stderr, flush=True)
            warm = format_warmup(building, tasks, cfg.warmup_steps, seed=cfg.seed)
            (building / "warmup.json").write_text(json.dumps(asdict(warm), indent=2) + "\n")
            log.info("format warm-up: %d steps in %.1f s, answer loss %.2f -> %.2f", warm.steps, warm.seconds,
                     warm.first_loss, warm.last_loss)
        shutil.rmtree(out, ignore_errors=True)
        building.rename(out)
    return str(out)


def _given(cfg: PipelineConfig) -> bool:
    """The run trains a folder of the user's (not the tiny one it builds itself)."""
    return bool(cfg.model) and Path(cfg.model) != cfg.tiny_model_dir()


def load_model_folder(resolved: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> tuple[PipelineConfig, Any]:
    """Make the run folder, build the tiny model when the run has no folder of its own (preflight checked a given
    one), load its tokenizer: the resolved config with the pad id (and, where the engines share a GPU with the
    trainer, their KV cache sized by the memory plan, ``rollart.pipeline.memory_plan``), and the tokenizer."""
    from rollart.models import load_tokenizer
    resolved.run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(resolved.model if _given(resolved) else build_tiny(resolved, tasks))
    return apply_emulation(apply_memory_plan(with_pad_id(resolved, tokenizer.pad_token_id or 0))), tokenizer


def prepare_run(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> Prepared:
    """What a Coordinator of ``tasks`` does before it starts any actor: preflight, resolve, model folder."""
    plan = preflight(cfg, RunTasks(list(tasks), list(tasks), []))
    config, tokenizer = load_model_folder(resolve(cfg, plan), tasks)
    return Prepared(config, tokenizer, plan)
