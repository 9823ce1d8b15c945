"""RewardConfig: how a training run scores its trajectories (``reward.*`` on a recipe's command line).

By default a trajectory's reward is the env's own return. ``reward.endpoint=URL`` scores it through a running
serverless reward endpoint (:mod:`rollart.rewards.serve`); ``reward.serverless=true`` starts one for the run
(``python -m rollart.rewards.serve`` as a process of its own, stopped at the end). Either way the call is
``function(text, reference)``: the model's last answer and the env's ``info[reference_key]``.
"""
from __future__ import annotations

from dataclasses import dataclass

from rollart.config import ConfigError
from rollart.rewards.registry import BUILTIN_FUNCTIONS, parse_spec


@dataclass
class RewardConfig:
    """Where trajectory rewards come from; the endpoint settings apply when ``endpoint`` or ``serverless``
    is set."""

    endpoint: str = ""
    """URL of a running reward endpoint (http://host:port); empty: none."""
    serverless: bool = False
    """Start a local reward endpoint for the run (a real process: its worker pool scales with load and back
    to zero) and score through it."""
    function: str = "math_reward"
    """Name of the reward function the endpoint runs: ``function(text, reference) -> float``."""
    functions: tuple[str, ...] = BUILTIN_FUNCTIONS
    """What a local endpoint (serverless=true) serves: module:function specs (alias=module:function); by default
    math_reward and the built-in verifiers (math_verify, exact_match, regex_match, numeric, code_tests,
    format_reward)."""
    reference_key: str = "answer"
    """Key of the reference in the env's final info (MathTool puts the answer there)."""
    tasks: tuple[str, ...] = ()
    """Tasks scored through the endpoint (empty: every task); the others keep the env's return."""
    token: str = ""
    """Bearer token of the endpoint (a local one is started with it)."""
    retries: int = 4
    """Extra attempts of a call that failed in a retryable way (5xx, 429, connection lost, timeout)."""
    backoff_s: float = 0.1
    """First retry delay (doubled per retry, jittered)."""
    attempt_timeout_s: float = 30.0
    """Seconds one HTTP attempt may take."""
    timeout_s: float = 300.0
    """Seconds scoring one trajectory may take in all (attempts and back-off); then it is dropped, the reason
    naming this setting. Bounds any reward source, a reward function passed in code too (one that calls a
    service of its own)."""
    max_concurrency: int = 64
    """Reward calls in flight at once."""
    max_workers: int = 4
    """Local endpoint: most worker processes (it autoscales from zero up to this)."""
    idle_timeout_s: float = 10.0
    """Local endpoint: seconds a worker stays without work before it exits."""
    call_timeout_s: float = 30.0
    """Local endpoint: seconds one call may run before its worker is killed (the call fails, retryable)."""
    hw_class: str = ""
    """Local endpoint with cluster.backend=ray: the class of node Ray places it on (a custom resource nodes
    declare, e.g. CPU-pool); empty: any node with a free CPU. Ray restarts it on a surviving node."""
    fault_rate: float = 0.0
    """Local endpoint, for tests: fraction of calls given an injected fault (raise, crash or hang)."""
    fault_seed: int = 0
    """Local endpoint: seed of the fault injector."""
    judges: tuple[str, ...] = ()
    """Model-based reward: HF-format model folders (e.g. SmolLM2-135M-Instruct: python -m
    rollart.tools.get_smollm2) judging each trajectory's last answer by its likelihood given the reference
    (:mod:`rollart.rewards.judges`); ``judge_weight`` x their mean score is added to the reward. With
    actions.enabled=true the judges are services of the GPU-service manager (restored / evicted within
    actions.service_memory_mb); else they stay loaded in the coordinator. Empty: none."""
    judge_weight: float = 0.1
    """Weight of the judges' mean score in the reward."""

    def __post_init__(self) -> None:
        if self.endpoint and self.serverless:
            raise ConfigError(f"reward.endpoint={self.endpoint!r} and reward.serverless=true: choose one (the "
                              "endpoint to call, or a local one started for the run)")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"reward.endpoint={self.endpoint!r}: give an http:// or https:// URL")
        if self.serverless:
            try:
                names = [parse_spec(s)[0] for s in self.functions]
            except ValueError as e:
                raise ConfigError(f"reward.functions: {e}") from None
            if self.function not in names:
                raise ConfigError(f"reward.function={self.function!r} is not served by reward.functions="
                                  f"{list(self.functions)}; name one of {names} or add its module:function")
        if self.hw_class and not self.serverless:
            raise ConfigError(f"reward.hw_class={self.hw_class!r} places an endpoint started for the run: set "
                              "reward.serverless=true, or drop it")
        for name in ("retries", "fault_seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"reward.{name}={getattr(self, name)} must be >= 0")
        for name in ("max_concurrency", "max_workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"reward.{name}={getattr(self, name)} must be >= 1")
        for name in ("attempt_timeout_s", "timeout_s", "idle_timeout_s", "call_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"reward.{name}={getattr(self, name)} must be > 0")
        if self.backoff_s < 0:
            raise ConfigError(f"reward.backoff_s={self.backoff_s} must be >= 0")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ConfigError(f"reward.fault_rate={self.fault_rate} must be within [0, 1]")

    @property
    def uses_endpoint(self) -> bool:
        """True when rewards are scored through an endpoint (given or started)."""
        return bool(self.endpoint) or self.serverless
