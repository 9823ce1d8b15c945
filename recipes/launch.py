"""What every recipe's main() does with its config: build the Coordinator, run it, and end cleanly.

A config mistake found when the Coordinator checks its config (model folder, hw_affinity, env ids), a sandbox
that cannot isolate on this machine, a ``--resume`` with no intact checkpoint, a rollout that cannot make
progress (every group failing, e.g. an env that always raises: the message counts the reasons), a trainer or
weight store that died with no restart left, and Ctrl-C end with one line on stderr instead of a traceback
(through ``rollart.config.exit_with_error``: ``ROLLART_TRACEBACK=1`` shows it); a lost actor and Ctrl-C say how
``--resume`` continues the run. Each recipe's ``main`` runs under ``@exit_on_config_error()``, so a config
mistake found anywhere else in it ends the same way.
"""
from __future__ import annotations

import asyncio
import shlex
import sys

from rollart.config import ConfigError, exit_on_config_error, exit_with_error
from rollart.pipeline import Coordinator, PipelineConfig, RunResult
from rollart.pipeline.recovery import ActorLostError
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutError
from rollart.sandbox import SandboxUnavailable
from rollart.trainer.checkpoint import CheckpointError


def interrupted_message(coordinator: Coordinator) -> str:
    from rollart.trainer.checkpoint import latest
    found = latest(coordinator.run_dir / "checkpoints")
    if found is None:
        return (f"interrupted: no checkpoint in {coordinator.run_dir} yet (checkpoint_every="
                f"{coordinator.cfg.checkpoint_every}); a new run starts from scratch")
    return f"interrupted: --resume continues from {found}"


def resume_command() -> str:
    """The command line that started this process, with ``--resume``: what continues the run."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", sys.argv[0]]
    args = [a for a in sys.argv[1:] if a != "--resume" and not a.startswith(("resume=", "--resume="))]
    return shlex.join([*head, *args, "--resume"])


def check_sandbox(mode: str) -> str:
    """The sandbox mode a run's envs will use, found before anything starts; one line when none works here."""
    from rollart.sandbox import resolve_mode
    try:
        return resolve_mode(mode)
    except SandboxUnavailable as e:
        exit_with_error(str(e))


def run(cfg: PipelineConfig, tasks: list[TaskSpec], **kwargs) -> RunResult:
    """``asyncio.run(Coordinator(cfg, tasks, **kwargs).run())`` with the clean endings above."""
    with exit_on_config_error():
        coordinator = Coordinator(cfg, tasks, **kwargs)
    print(f"run folder: {coordinator.run_dir} (config.json, checkpoints/; watch: tensorboard --logdir {cfg.logdir})",
          flush=True)
    try:
        return asyncio.run(coordinator.run())
    except RolloutError as e:
        exit_with_error(f"rollout stopped: {e}")
    except ActorLostError as e:
        exit_with_error(f"{e}; continue with: {resume_command()}")
    except (ConfigError, CheckpointError, SandboxUnavailable) as e:
        exit_with_error(str(e))
    except KeyboardInterrupt:
        print(interrupted_message(coordinator), file=sys.stderr)
        raise SystemExit(130) from None


def peak_gpu_memory_line(result: RunResult) -> str | None:
    """``peak_gpu_memory_gb trainer=... gen-0=...`` for the actors that ran on a GPU, or None."""
    on_gpu = {name: st["peak_memory_gb"] for name, st in result.devices.items() if "peak_memory_gb" in st}
    if not on_gpu:
        return None
    return "peak_gpu_memory_gb " + " ".join(f"{name}={gb:.2f}" for name, gb in on_gpu.items())
