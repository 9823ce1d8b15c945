"""Step three of a run's config: what needs I/O or the run's tasks, checked before any process starts or the run
folder is made: the model folder, a placement plan (read here), the routing of every task, held-out tasks
disjoint from training, the reward source, the env registry, the installed backends, the devices and the CPU.
Each problem is one ConfigError line naming the setting.

    plan = preflight(cfg, RunTasks(train, eval, heldout), reward_fn)   # None without placement=
    resolved = resolve(cfg, plan)                                      # rollart.pipeline.resolve
"""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any, Optional

from rollart.config import ConfigError
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.heldout import check_disjoint
from rollart.pipeline.run_plan import RunPlacement
from rollart.pipeline.resolve import worker_classes
from rollart.pipeline.run_state import RunTasks
from rollart.rewards.dispatch import RewardFn
from rollart.rewards.scoring import check_scoring
from rollart.rollout.routing import check_hw_affinity

log = logging.getLogger("rollart.pipeline")


def preflight(cfg: PipelineConfig, tasks: RunTasks, reward_fn: Optional[RewardFn] = None,
              registered_envs: bool = True) -> Optional[RunPlacement]:
    """Check ``cfg`` against this machine and ``tasks``; returns the placement plan it read (None without one).
    ``registered_envs``: the envs are made in this process (not on remote env hosts), so their ids are checked
    in gymnasium's registry here."""
    every = [*tasks.train, *tasks.eval, *tasks.heldout]
    check_model(cfg)
    plan = RunPlacement.load(cfg.placement) if cfg.placement else None
    check_plan(cfg, plan)
    classes = worker_classes(cfg, plan)
    check_pd(cfg, classes)
    check_hw_affinity(cfg.proxy.hw_affinity, classes, [t.name for t in every])
    check_disjoint(tasks.train, tasks.heldout)
    check_scoring(cfg.reward, reward_fn, tasks.train)
    if registered_envs:
        check_env_ids(every)
    cfg.cluster.check_installed()
    if cfg.engine.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        from rollart.engine.vllm_backend import INSTALL_HINT
        raise ConfigError(f"engine.backend=vllm: {INSTALL_HINT}; or use engine.backend=torch")
    check_devices(cfg, plan)
    return plan


def check_model(cfg: PipelineConfig) -> None:
    """``model`` (when set) is an HF-format folder with a config, a tokenizer and weights, and no warm-up is
    asked of it; so is every judge of ``reward.judges``."""
    for i, judge in enumerate(cfg.reward.judges):
        check_model_folder(judge, f"reward.judges[{i}]", "")
    if not cfg.model:
        return
    if cfg.warmup_steps:
        raise ConfigError(f"warmup_steps={cfg.warmup_steps} warms up the tiny model built when model is empty, "
                          f"not model={cfg.model!r}; set warmup_steps=0 (fine-tune your model beforehand)")
    check_model_folder(cfg.model, "model", ", or leave model empty for a tiny random-init model")
    check_model_support(cfg)


def check_model_support(cfg: PipelineConfig) -> None:
    """rollart's transformer runs ``model``: the trainer always trains with it, the engine serves with it unless
    engine.backend=vllm."""
    from rollart.models import ModelConfig, UnsupportedModel
    try:
        ModelConfig.from_pretrained(cfg.model)
    except UnsupportedModel as e:
        why = ("rollart's trainer cannot train it" if cfg.engine.backend == "vllm" else
               "rollart's engine cannot serve it (engine.backend=vllm can), nor can rollart's trainer train it")
        raise ConfigError(f"model={cfg.model!r}: {e.at(folder='', remedy=why)}") from None
    except ConfigError as e:  # a value out of range, the file named
        raise ConfigError(f"model={cfg.model!r}: {e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"model={cfg.model!r}: {cfg.model}/config.json is not a readable HF model config "
                          f"({type(e).__name__}: {e})") from None


def check_model_folder(path: str, key: str, alternative: str) -> None:
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{key}={path!r} is not a folder; pass an HF-format model folder with its tokenizer"
                          f"{alternative}")
    missing = [f for f in ("config.json", "tokenizer.json") if not (folder / f).is_file()]
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ConfigError(f"{key}={path!r} has no {' or '.join(missing)}; pass an HF-format model folder "
                          "with its tokenizer (python -m rollart.tools.make_tiny_model OUT builds one)")


def check_plan(cfg: PipelineConfig, plan: Optional[RunPlacement]) -> None:
    """Settings a plan decides are not given too; its data-parallel ranks run as processes."""
    if plan is not None:
        if (cfg.num_inference_workers, tuple(cfg.hw_classes)) not in ((1, ("H20",)), (len(plan.generate),
                                                                                      plan.hw_classes)):
            raise ConfigError(f"num_inference_workers / hw_classes come from placement={cfg.placement!r} "
                              f"({len(plan.generate)} workers: {','.join(plan.hw_classes)}); drop them")
        if cfg.trainer.world_size not in (1, plan.train_dp):
            raise ConfigError(f"trainer.world_size={cfg.trainer.world_size} but placement={cfg.placement!r} plans "
                              f"{plan.train_dp} data-parallel trainer rank(s); drop trainer.world_size (it comes "
                              "from the plan)")
        if plan.train_dp > 1 and (cfg.trainer_actor_mode or cfg.actor_mode) != "process":
            raise ConfigError(f"placement={cfg.placement!r} plans {plan.train_dp} data-parallel trainer ranks, one "
                              "process each: set trainer_actor_mode=process (or actor_mode=process)")


def check_pd(cfg: PipelineConfig, classes: list[str]) -> None:
    """pd=true: two worker classes, the first prefills and the second decodes (resolve sets the proxy's)."""
    if not cfg.pd:
        return
    groups = list(dict.fromkeys(classes))
    if len(groups) != 2:
        raise ConfigError(f"pd=true needs a prefill and a decode worker group, got worker classes {groups}: set "
                          "hw_classes=H800,H20 (the first prefills, the second decodes) and num_inference_workers>=2")
    if (cfg.proxy.pd_prefill_class, cfg.proxy.pd_decode_class) not in (("", ""), tuple(groups)):
        raise ConfigError(f"pd=true sets proxy.pd_prefill_class/pd_decode_class to {groups}; drop the proxy's own "
                          f"({cfg.proxy.pd_prefill_class!r}, {cfg.proxy.pd_decode_class!r})")


def check_env_ids(tasks: list[Any]) -> None:
    """Every env task's ``env_id`` is registered with gymnasium in this process."""
    import gymnasium as gym
    for task in tasks:
        if not hasattr(task, "env_id"):
            continue  # an agent task: no env to find
        try:
            gym.spec(task.env_id)
        except gym.error.Error as e:
            raise ConfigError(f"task {task.name!r}: env_id={task.env_id!r} is not registered ({e}); "
                              "gymnasium.register it, or import the module that does, before starting") from None


def check_devices(cfg: PipelineConfig, plan: Optional[RunPlacement]) -> None:
    """The engine's and the trainer's devices exist here (``cuda`` with no GPU visible is one line now, not an
    actor failing at start), a local plan fits this machine, and bf16 asked for on a CPU without native bf16
    is said once (``rollart.devices``)."""
    if cfg.cluster.backend != "local":
        return  # on Ray the actors' nodes, not this one, hold the devices
    from rollart.devices import resolve_device, resolve_dtype
    cuda = False
    for key, component in (("engine", cfg.engine), ("trainer", cfg.trainer)):
        device = resolve_device(component.device if component.device != "auto" else cfg.device, key=f"{key}.device")
        resolve_dtype(component.dtype if component.dtype != "auto" else cfg.dtype, device, key=f"{key}.dtype")
        cuda = cuda or device.type == "cuda"
    if plan is not None:
        plan.check_fits_locally(cuda, _cuda_count() if cuda else 0)


def _cuda_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
