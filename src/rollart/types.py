"""The data vocabulary every plane shares, one type per concept from the proxy down to the engine.

- a request: ``SamplingParams`` and ``GenerateRequest`` (validated once, where a request enters: the
  LLMProxy); ``AbortRequest``;
- its one output: ``GenerationResult``, which engines return and the worker completes;
- ``EngineStats``: what every engine backend reports from ``stats()``;
- weight sync: ``WeightBucket`` (a version + named tensors), ``PullWeights`` and ``UpdateWeights`` (versions
  and addresses: the tensors themselves move on the weight plane, ``rollart.weightplane``);
- ``Trajectory``: a finished (or aborted) episode with per-token training data.

Per-token arrays in a Trajectory are aligned with ``token_ids`` (prompt, observations and model
output concatenated in chat-template order). ``loss_mask[i] == 1`` only for tokens the model
generated; those alone are trained. ``logprobs[i]`` / ``versions[i]`` are the behaviour log-probability
and the policy version that sampled token i (0.0 / -1 for non-model tokens).

Every dataclass here crosses the actor wire as is (the codec allows ``rollart.`` dataclasses and
ships tensors inside them as zero-copy frames). This module imports nothing else from rollart.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


class InvalidRequestError(ValueError):
    """A single request was bad (empty prompt, too long, invalid sampling). Recoverable per request."""


# ---------------------------------------------------------------- requests

@dataclass
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest token set whose probability reaches top_p (0 < top_p <= 1)."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 disables."""
    max_tokens: int = 64
    """Maximum number of new tokens to generate."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Generation stops after any of these tokens (the token is kept in the output)."""
    stop: list[str] = field(default_factory=list)
    """Generation stops once the decoded output contains any of these strings."""
    seed: int | None = None
    """Per-request seed: the same seed, prompt and weights give the same tokens."""
    ignore_eos: bool = False
    """Keep generating past the tokenizer's end-of-sequence token."""
    min_tokens: int = 0
    """Generate at least this many tokens: stop tokens, EOS and stop strings end generation only after
    it (they are sampled as usual, not masked, so logprobs stay those of the policy; vLLM masks them)."""

    def __post_init__(self) -> None:
        if not (self.temperature >= 0):
            raise InvalidRequestError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (self.top_k == -1 or self.top_k >= 1):
            raise InvalidRequestError(f"top_k must be -1 (disabled) or >= 1, got {self.top_k}")
        if not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise InvalidRequestError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not (isinstance(self.min_tokens, int) and 0 <= self.min_tokens <= self.max_tokens):
            raise InvalidRequestError(f"min_tokens must be an int in [0, max_tokens={self.max_tokens}], "
                                      f"got {self.min_tokens!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SamplingParams":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InvalidRequestError(f"unknown sampling parameters {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)

    @classmethod
    def of(cls, sampling: "SamplingParams | dict | None") -> "SamplingParams":
        """A caller's sampling (typed, a dict of fields, or None for the defaults) as SamplingParams."""
        if isinstance(sampling, SamplingParams):
            return sampling
        if sampling is None or isinstance(sampling, dict):
            return cls.from_dict(sampling or {})
        raise InvalidRequestError(f"sampling must be SamplingParams or a dict, got {type(sampling).__name__}")


def token_ids(prompt: Any, what: str) -> list[int]:
    """A caller's prompt as a non-empty list of ints (numpy / torch integer scalars accepted)."""
    if isinstance(prompt, (str, bytes)):
        raise InvalidRequestError(f"{what}: prompt_token_ids must be a list of integer token ids, got text")
    try:
        ids = [operator.index(t) for t in prompt]
    except TypeError:
        raise InvalidRequestError(f"{what}: prompt_token_ids must be a list of integer token ids") from None
    if not ids:
        raise InvalidRequestError(f"{what}: empty prompt; send at least one token")
    return ids


@dataclass
class KVBlocks:
    """A prompt's K/V handed from a prefill worker to a decode worker (PD disaggregation).

    ``data`` (L, 2, blocks, block_size, Hkv, D), the prompt's blocks gathered contiguous, crosses the actor
    wire as one zero-copy frame; or, where both workers share a GPU, ``ipc`` describes a device buffer
    (``rollart.weightplane.cuda.export_ipc``) the decode worker copies from, with ``node`` naming the machine."""
    num_tokens: int
    dtype: str
    version: int = 0
    """Policy version of the weights that computed it (a decode engine on other weights recomputes)."""
    data: Any = None
    ipc: dict | None = None
    node: str = ""

    @property
    def nbytes(self) -> int:
        if self.data is not None:
            return int(self.data.numel() * self.data.element_size())
        return int(self.ipc.get("nbytes", 0)) if self.ipc else 0


@dataclass
class GenerateRequest:
    """One generation, as the proxy sends it to an inference worker (already validated)."""
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    trajectory_id: str = ""
    """The trajectory it serves (for the worker's speed model and logs)."""
    task: str = ""
    """The task it serves (the name the proxy routed it by; an emulated engine times it as that task's turns)."""
    export_kv: str = ""
    """PD prefill side: hand back the prompt's K/V in the result ("frames" | "ipc" | "auto"; "" = no)."""
    kv: KVBlocks | None = None
    """PD decode side: the K/V of the first ``kv.num_tokens`` prompt tokens, installed instead of computed."""


@dataclass
class AbortRequest:
    """End one request on a worker; its generate returns finish_reason 'abort'. Idempotent."""
    request_id: str


# ---------------------------------------------------------------- outputs

@dataclass
class GenerationResult:
    token_ids: list[int]
    """New tokens, in order (a stop token or the token completing a stop string is included)."""
    logprobs: list[float]
    """Log-probability of each sampled token under log_softmax(logits) of the producing policy."""
    versions: list[int]
    """Policy version that produced each token (changes mid-request after a weight update)."""
    finish_reason: str
    """'stop' (stop token / string / eos), 'length' (max_tokens or context), 'abort', 'error'."""
    text: str = ""
    """Decoded tokens (special tokens skipped); empty when no tokenizer is at hand."""
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (not recomputed)."""
    worker: str = ""
    """Which inference worker served it (for routing tests and metrics)."""
    request_id: str = ""
    error: str = ""
    """Why the request failed (finish_reason 'error'); the worker raises it as InvalidRequestError."""
    kv: KVBlocks | None = None
    """The prompt's K/V, when the request asked for it (``GenerateRequest.export_kv``)."""


@dataclass
class EngineStats:
    """Cumulative counters of one engine, the same for every backend."""
    steps: int = 0
    requests_added: int = 0
    prompt_tokens: int = 0
    """Prompt tokens of every added request."""
    computed_prompt_tokens: int = 0
    """Prompt/context tokens actually computed (incl. recomputation)."""
    prefix_hit_tokens: int = 0
    """Tokens served from the prefix cache."""
    generated_tokens: int = 0
    preemptions: int = 0
    aborted: int = 0
    weight_updates: int = 0
    recomputed_tokens: int = 0
    """Tokens whose K/V were dropped by weight updates (to be recomputed)."""
    update_seconds: float = 0.0
    """Time spent loading new weights."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific gauges (KV blocks free, running/waiting requests)."""


# ---------------------------------------------------------------- weights

@dataclass
class WeightBucket:
    """Named tensors of one policy version: one bucket of a push, or a whole version."""
    version: int
    tensors: dict[str, Any]
    """HF parameter name -> tensor, in the order they are loaded."""
    index: int = 0
    """Position of this bucket in its version's push (0 for a whole version)."""

    @classmethod
    def of(cls, version: int, named_tensors: Iterable[tuple[str, Any]] | dict[str, Any], index: int = 0) -> "WeightBucket":
        items = named_tensors.items() if isinstance(named_tensors, dict) else named_tensors
        return cls(int(version), dict(items), index)

    @classmethod
    def merge(cls, buckets: list["WeightBucket"]) -> "WeightBucket":
        """The buckets of one version (in index order) as one whole-version bucket."""
        versions = {b.version for b in buckets}
        if len(versions) != 1:
            raise ValueError(f"cannot merge weight buckets of versions {sorted(versions)}")
        return cls(versions.pop(), {n: t for b in buckets for n, t in b.tensors.items()})

    def named_tensors(self) -> Iterator[tuple[str, Any]]:
        return iter(self.tensors.items())

    @property
    def names(self) -> list[str]:
        return list(self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


@dataclass
class PullWeights:
    """Start fetching a weight version on an inference worker, in the background, over the weight plane
    (``rollart.weightplane``): the message names the version and addresses, never carries tensors."""
    version: int
    source: str
    """Weight-plane address of the relay parent (the store or another worker) to pull from."""
    fallback: str = ""
    """The weight store's address, asked when ``source`` loses or corrupts a bucket or is gone."""
    ipc_source: str = ""
    """The trainer's weight-plane address when it shares this worker's node and GPU kind (CUDA IPC)."""
    timeout_s: float = 30.0
    """Seconds one bucket may take before it counts as lost and is asked for again."""
    retries: int = 3
    """Times one lost or corrupt bucket is asked for again before the pull fails."""


@dataclass
class UpdateWeights:
    """Install a whole weight version on an inference worker, between two engine steps.

    Without ``weights`` the worker installs the version it pulled (``PullWeights``), first pulling it from
    ``source`` when it holds no pull of it (e.g. it was restarted); ``weights`` given in-process are
    installed as they are (tests, a single-process engine)."""
    version: int
    source: str = ""
    """The weight store's address (where a worker without a pull of ``version`` fetches it)."""
    weights: WeightBucket | None = None

    @classmethod
    def of(cls, weights: WeightBucket) -> "UpdateWeights":
        return cls(weights.version, weights=weights)


# ---------------------------------------------------------------- trajectories

@dataclass
class Trajectory:
    trajectory_id: str
    group_id: str
    task: str
    """Task name; hw_mapping routes its generations by it."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    start_version: int = 0
    """Policy version when the trajectory started (its first generation request)."""
    reward: float = 0.0
    success: bool = False
    num_turns: int = 0
    status: str = "running"
    """running | done | aborted | failed"""
    reason: str = ""
    """Why it was aborted or failed."""
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in env_reset, env_step, generate, reward."""

    @classmethod
    def begin(cls, trajectory_id: str, group_id: str, task: str, seed: int | None) -> "Trajectory":
        """One about to be played: its seed in ``info``, its env and generation timings at zero."""
        return cls(trajectory_id=trajectory_id, group_id=group_id, task=task, info={"seed": seed},
                   timings={"env_reset": 0.0, "env_step": 0.0, "generate": 0.0})
