"""A nested config dataclass with docstrings, as a run's config is: what the monitor tests log and read back."""
from dataclasses import dataclass, field


@dataclass
class _Inner:
    lr: float = 1e-3
    """Learning rate."""


@dataclass
class LoggedConfig:
    total_steps: int = 5
    """Number of train steps."""
    train: _Inner = field(default_factory=_Inner)
