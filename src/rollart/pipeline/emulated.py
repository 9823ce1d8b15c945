"""A run on emulated hardware (``simulate_hardware=true``, ``rollart.emulation``): the weight plane's link rate,
known once the model folder exists, and the one line that says what the run emulates."""
from __future__ import annotations

import dataclasses
import logging

from rollart.emulation import describe, link_gb_s
from rollart.hardware import model_shape

log = logging.getLogger("rollart.pipeline")


def on_emulated_gpus(cfg, *, time_scale: float, trainer_devices: int, model: str = "Qwen3-8B",
                     link_bytes_per_s: float = 0.0, **settings):
    """``cfg`` with every role on emulated hardware: ``model``'s engine steps on the workers' classes, its train
    steps on ``trainer_devices`` H800s, weight pulls over ``link_bytes_per_s`` (0: at the real plane's speed), every
    time × ``time_scale``; ``settings`` (``apply_values`` keys: the workers, routing) on top."""
    from rollart.config import apply_values
    emulation = {"model": model, "trainer_hw_class": "H800", "trainer_devices": trainer_devices,
                 "weight_link": "tcp" if link_bytes_per_s else "none"}
    return apply_values(dataclasses.replace(cfg, simulate_hardware=True, sim_time_scale=time_scale,
                                            weight_link_bytes_per_s=link_bytes_per_s, emulation=emulation), settings)


def apply_emulation(cfg):
    """``cfg`` (resolved, its model folder in place) with ``weight_link_bytes_per_s`` set so that a weight pull of
    the real model lasts what the emulated model's takes over ``emulation.weight_link`` (an explicit rate wins);
    the line printed. Unchanged without ``simulate_hardware``."""
    if not cfg.simulate_hardware:
        return cfg
    from rollart.models.config import ModelConfig
    gb_s = 0.0
    if cfg.emulation.weight_link != "none" and not cfg.weight_link_bytes_per_s:
        gb_s = link_gb_s(cfg.emulation.model, cfg.emulation.weight_link)
        import torch

        from rollart.devices import placement
        moved = placement(cfg.trainer.device, cfg.trainer.dtype).dtype  # versions leave the trainer in its dtype
        real = ModelConfig.from_pretrained(cfg.model).num_params() * torch.empty((), dtype=moved).element_size()
        scale = real / model_shape(cfg.emulation.model).weight_bytes  # real bytes per emulated byte
        cfg = dataclasses.replace(cfg, weight_link_bytes_per_s=gb_s * 1e9 * scale / cfg.sim_time_scale)
    elif cfg.weight_link_bytes_per_s:
        gb_s = cfg.weight_link_bytes_per_s / 1e9
    line = describe(cfg.emulation.model, cfg.worker_hw_classes(), cfg.trainer_speed(), gb_s, cfg.sim_time_scale,
                    cfg.emulation.token_scale, cfg.weight_push_bytes_per_s / 1e9, cfg.emulation.task_profiles,
                    cfg.emulation.task_turns)
    log.info("%s", line)
    print(line, flush=True)
    return cfg


def trainer_outran(history: list[dict], time_scale: float) -> str:
    """One line when the trainer's real compute outlasted its emulated time in some steps (its timing then is this
    CPU's, not the emulated GPUs'), naming the time scale that would hold; '' when every step was emulated."""
    steps = [h for h in history if "system/train_emulated_s" in h]
    over = [h for h in steps if h["system/train_outran"]]
    if not over:
        return ""
    worst = max(h["system/train_real_s"] / h["system/train_emulated_s"] for h in over)
    return (f"trainer: the real compute outran the emulated time in {len(over)} of {len(steps)} train steps (up to "
            f"{worst:.1f}x): their timing is this CPU's, not emulated; sim_time_scale={time_scale * worst:.3g} or more "
            "would hold")
