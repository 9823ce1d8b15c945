"""Step two of a run's config: ``resolve`` derives every value the run's parts receive from the settings (and a
placement plan, already read by ``preflight``), once per run. Pure: no I/O, the same input gives the same
config. Derived fields (``PipelineConfig.DERIVED``) given a value of their own are refused here, in one line.

    plan = preflight(cfg, tasks)                 # step three: what needs I/O (rollart.pipeline.preflight)
    resolved = resolve(cfg, plan)                # buffer bounds, seeds, model folder, devices, plan's classes
    resolved = with_pad_id(resolved, tok.pad_token_id or 0)   # once the model's tokenizer is known
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rollart.config import ConfigError
from rollart.hardware import HARDWARE, SpeedModelConfig
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.run_plan import RunPlacement
from rollart.rollout.buffer import BufferConfig


def worker_classes(cfg: PipelineConfig, plan: RunPlacement | None = None) -> list[str]:
    """The hardware class of each inference worker, in order: the plan's, else ``hw_classes`` cycled over
    ``num_inference_workers``."""
    return list(plan.hw_classes) if plan is not None else cfg.worker_hw_classes()


def resolve(cfg: PipelineConfig, plan: RunPlacement | None = None) -> PipelineConfig:
    """``cfg`` with every derived value filled in (see ``PipelineConfig.DERIVED``): what the run's parts receive
    and ``config.json`` records. ``trainer.pad_id`` comes later, from the model's tokenizer (``with_pad_id``)."""
    r = cfg.rollout
    classes = worker_classes(cfg, plan)
    model = cfg.model or str(cfg.tiny_model_dir())
    buffer = BufferConfig(
        mode=cfg.mode, alpha=cfg.alpha, group_size=r.group_size,
        capacity=max(cfg.batch_size, (cfg.alpha + 1) * r.max_concurrency),
        # AReaL bounds staleness only when a trajectory starts: rollout at most α batches ahead of training.
        # ROLLART bounds it at the start too and, unlike AReaL, at every turn (RollArt §6.2 fn. 1), so it does
        # not start groups only a staler batch could take.
        max_outstanding_groups=(cfg.alpha + 1) * cfg.batch_groups + r.extra_groups
        if cfg.mode in ("areal", "async") else 0)
    speed = {hw: SpeedModelConfig(hw_class=hw, model=cfg.emulation.model, time_scale=cfg.sim_time_scale,
                                  token_scale=cfg.emulation.token_scale, task_profiles=cfg.emulation.task_profiles,
                                  task_turns=cfg.emulation.task_turns)
             for hw in dict.fromkeys(classes)
             if hw in HARDWARE and HARDWARE[hw].kind == "gpu"} if cfg.simulate_hardware else {}
    proxy = cfg.proxy
    if cfg.pd:  # the first class prefills, the second decodes
        prefill, decode = dict.fromkeys(classes)
        proxy = dataclasses.replace(proxy, pd_prefill_class=prefill, pd_decode_class=decode)
    placed = dict(num_inference_workers=len(plan.generate), hw_classes=plan.hw_classes) if plan is not None else {}
    resolved = dataclasses.replace(
        cfg, **placed, model=model, buffer=buffer, rollout=dataclasses.replace(r, seed=cfg.seed),
        engine=dataclasses.replace(cfg.engine, model=model, seed=cfg.seed, lora=cfg.trainer.lora,
                                   **_placement_for(cfg, cfg.engine)),
        trainer=dataclasses.replace(cfg.trainer, model_path=model, seed=cfg.seed,
                                    world_size=plan.train_dp if plan is not None else cfg.trainer.world_size, **_placement_for(cfg, cfg.trainer)),
        speed_models=speed, proxy=proxy)
    _check_derived(cfg, resolved)
    return resolved


def with_pad_id(resolved: PipelineConfig, pad_id: int) -> PipelineConfig:
    """The resolved config with the model's tokenizer's padding id (the one value known only once the model
    folder exists)."""
    given = resolved.trainer.pad_id
    if given != _default(resolved, "trainer.pad_id") and given != pad_id:
        raise ConfigError(f"trainer.pad_id={given!r} would be replaced by {pad_id!r}, derived from the model's "
                          "tokenizer; leave it unset")
    return dataclasses.replace(resolved, trainer=dataclasses.replace(resolved.trainer, pad_id=pad_id))


def _placement_for(cfg: PipelineConfig, component: Any) -> dict[str, str]:
    """The run's device/dtype for each of ``component``'s device/dtype settings left at auto."""
    return {k: getattr(cfg, k) for k in ("device", "dtype") if getattr(component, k) == "auto"}


def _check_derived(cfg: PipelineConfig, resolved: PipelineConfig) -> None:
    """Refuse a derived field given a value of its own that ``resolved`` replaces: the command line cannot set
    them, but a config built in Python can. (A resolved config passes: its values are the derived ones.)"""
    for key, source in PipelineConfig.DERIVED.items():
        given, derived = _get(cfg, key), _get(resolved, key)
        if given != _default(cfg, key) and given != derived:
            raise ConfigError(f"{key}={given!r} would be replaced by {derived!r}, derived from {source}; "
                              "set that instead")


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _default(cfg: Any, key: str) -> Any:
    """The dataclass default of the field ``key`` (dotted) of ``cfg``."""
    parent, _, name = key.rpartition(".")
    owner = _get(cfg, parent) if parent else cfg
    f = next(f for f in dataclasses.fields(owner) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
