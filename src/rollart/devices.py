"""Where tensors live and in what precision: the one place that decides, for engine, trainer and weight store.

Settings are strings so configs can be checked before torch is imported: ``device`` is ``auto | cpu | cuda |
cuda:N`` and ``dtype`` is ``auto | float32 | bfloat16 | float16``. ``auto`` means CUDA and bfloat16 where a
GPU is visible, else the CPU and float32. An actor started for a GPU sees only its own GPUs through
``CUDA_VISIBLE_DEVICES`` (set by whoever starts it), so ``cuda`` inside it is the first of those.
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollart.config import ConfigError

if TYPE_CHECKING:
    import torch

DEVICES_HELP = "auto | cpu | cuda | cuda:N"
DTYPES = ("float32", "bfloat16", "float16")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
log = logging.getLogger(__name__)


def check_device(spec: str, key: str = "device") -> None:
    """Raise ConfigError, in one line, when ``spec`` is not a device setting (no torch import)."""
    if not isinstance(spec, str) or not _DEVICE.match(spec):
        raise ConfigError(f"{key}={spec!r}: choose one of {DEVICES_HELP}")


def check_dtype(spec: str, key: str = "dtype") -> None:
    """Raise ConfigError, in one line, when ``spec`` is not a dtype setting (no torch import)."""
    if spec != "auto" and spec not in DTYPES:
        raise ConfigError(f"{key}={spec!r}: choose one of auto, {', '.join(DTYPES)}")


def resolve_device(spec: str = "auto", key: str = "device") -> torch.device:
    """The torch device a setting names; ``cuda`` where no GPU is visible is a ConfigError saying so."""
    import torch

    check_device(spec, key)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == 0:
            raise ConfigError(f"{key}={spec!r} but torch sees no CUDA device (torch {torch.__version__}): "
                              "use device=cpu, or a CUDA build of torch on a GPU machine")
        if device.index is not None and device.index >= visible:
            raise ConfigError(f"{key}={spec!r} but only {visible} CUDA device(s) are visible "
                              "(CUDA_VISIBLE_DEVICES renumbers them from 0)")
    return device


def resolve_dtype(spec: str, device: torch.device, key: str = "dtype") -> torch.dtype:
    """The torch dtype a setting names on ``device``; ``auto`` is bfloat16 on a GPU that has it, else float32
    (on the CPU too: bf16 is faster there only with native bf16, and float32 is exact)."""
    import torch

    check_dtype(spec, key)
    if spec == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if spec == "bfloat16" and device.type == "cpu":
        _warn_bf16_without_native(key)
    return getattr(torch, spec)


@functools.cache
def _warn_bf16_without_native(key: str) -> None:
    """One line, once per setting and process, where bf16 is asked for on a CPU that only emulates it."""
    from rollart.cpu_features import bf16_linear_slowdown, cpu_features

    cpu = cpu_features()
    if not cpu.native_bf16:
        slowdown = bf16_linear_slowdown()
        advice = f"; {key}=auto (float32) is faster on this CPU" if slowdown > 1 else ""
        log.warning("%s=bfloat16 on a CPU without native bf16 (%s): a bf16 linear took %.1fx the time of a float32 "
                    "one here%s", key, cpu.describe(), slowdown, advice)


@dataclass(frozen=True)
class Placement:
    """A resolved (device, dtype) pair: every tensor a component creates lives here."""

    device: torch.device
    dtype: torch.dtype

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def placement(device: str = "auto", dtype: str = "auto", prefix: str = "") -> Placement:
    """Resolve both settings at once; ``prefix`` (e.g. ``"engine."``) names the keys in error messages."""
    dev = resolve_device(device, key=f"{prefix}device")
    return Placement(dev, resolve_dtype(dtype, dev, key=f"{prefix}dtype"))


def peak_memory(device: torch.device | str | None = None) -> dict[str, float]:
    """This process's peak CUDA memory on ``device`` in GiB (allocated by tensors, reserved by the caching
    allocator); ``{}`` on the CPU or where no GPU was used."""
    import torch

    device = torch.device(device) if device is not None else None
    if device is not None and device.type != "cuda" or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30,
            "peak_reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30}
