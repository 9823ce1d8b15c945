"""LLMEngine: the torch backend — continuous batching over a paged KV cache with prefix caching.

    engine = LLMEngine(EngineConfig(model="path/to/hf_folder"))
    engine.add_request(GenerateRequest("r1", prompt_token_ids, SamplingParams(temperature=0, max_tokens=32)))
    while engine.has_unfinished_requests():
        for out in engine.step():        # requests that finished in this step
            print(out.request_id, out.token_ids, out.finish_reason)

Every tensor it creates (weights, KV cache, per-step inputs, sampling state) lives on ``EngineConfig.device``
in ``EngineConfig.dtype`` (``rollart.devices``); ``model_runner`` describes the CPU reference path and the
CUDA kernel path. A plain class with no threads or sockets that implements ``rollart.engine.protocol.Engine``:
the inference worker drains commands (add / abort / update) between ``step()`` calls. ``update_weights`` keeps every in-flight request's tokens and recomputes its
K/V under the new weights before decoding continues (RollArt §6.2 step 5); every generated token
records the policy version that produced it. A LoRA run's versions are adapters only, merged onto the base
weights the engine keeps (``lora_weights``).
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from rollart.engine.block_manager import BlockManager
from rollart.engine.config import EngineConfig
from rollart.engine.detokenizer import StopStringChecker
from rollart.engine.kv_transfer import TRANSPORTS, KVExporter, unpack
from rollart.engine.lora_weights import LoraMerger, holds_adapters
from rollart.engine.model_runner import ModelRunner, kv_blocks_from_gpu_memory, kv_bytes_per_block
from rollart.engine.protocol import EngineCapabilities
from rollart.engine.batch_scheduler import Scheduler
from rollart.engine.sequence import Sequence
from rollart.models import CausalLM, UnsupportedModel, load_model, load_tokenizer
from rollart.types import (EngineStats, GenerateRequest, GenerationResult, InvalidRequestError, SamplingParams,
                           WeightBucket)


class LLMEngine:
    capabilities = EngineCapabilities(kv_transfer=True, prefix_namespaces=True, release_kv=True)

    def __init__(self, config: EngineConfig, model: CausalLM | None = None, tokenizer=None):
        self.config = config
        self.placement = config.placement()
        pl = self.placement
        if model is None:
            try:
                model = load_model(config.model, dtype=pl.dtype, device=pl.device)
            except UnsupportedModel as e:
                raise e.at(remedy="rollart's engine cannot serve it: set engine.backend=vllm (vLLM serves it)") from None
        self.runner = ModelRunner(model, config, pl)                        # moves the model to the device
        self.model = self.runner.model
        self.model.eval()
        self.weights_device = self.runner.device
        self.lora = LoraMerger(self.model, config.lora)
        """The base weights LoRA versions are merged onto (``engine.lora``)."""
        mc = self.model.config
        if tokenizer is None and config.model and (Path(config.model) / "tokenizer.json").is_file():
            tokenizer = load_tokenizer(config.model)
        self.tokenizer = tokenizer
        self.eos_token_ids = self._eos_ids()
        per_block = kv_bytes_per_block(mc, config.block_size, pl.dtype)
        if config.num_kv_blocks:
            num_blocks = config.num_kv_blocks
        elif pl.is_cuda:  # what fits, but no more than twice what max_num_seqs full-length sequences can use
            most = 2 * config.max_num_seqs * -(-(config.max_model_len or mc.max_position_embeddings) // config.block_size)
            num_blocks = min(kv_blocks_from_gpu_memory(self.runner, per_block), most)
        else:
            num_blocks = max(1, int(config.kv_cache_memory_gb * 2**30) // per_block)
        capacity = num_blocks * config.block_size
        self.max_model_len = config.max_model_len or min(mc.max_position_embeddings, capacity)
        if self.max_model_len > capacity:
            raise ValueError(f"max_model_len={self.max_model_len} exceeds the KV cache ({num_blocks} blocks x "
                             f"{config.block_size} = {capacity} tokens): raise num_kv_blocks / kv_cache_memory_gb")
        self.num_blocks = num_blocks
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens)
        self.runner.allocate(num_blocks, self.max_model_len)
        self.requests: dict[str, Sequence] = {}
        self.version = 0
        self._stats = EngineStats()
        self._rng = random.Random(config.seed)
        self._kv_exporter = KVExporter(pl.device)
        self.kv_seconds = {"export": 0.0, "install": 0.0}
        """Time spent gathering K/V for export and installing received K/V (PD disaggregation)."""

    def _eos_ids(self) -> set[int]:
        ids = set(self.model.config.eos_token_ids)
        gen = Path(self.config.model or "") / "generation_config.json"
        if self.config.model and gen.is_file():
            e = json.loads(gen.read_text()).get("eos_token_id")
            ids |= set([e] if isinstance(e, int) else (e or []))
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    # ---- requests -------------------------------------------------------------------------------
    def add_request(self, request: GenerateRequest) -> None:
        """Queue a request; raises InvalidRequestError (naming the problem) and changes nothing if it is bad.

        Takes typed values (the proxy validated the prompt and built the SamplingParams); checks only what
        this engine alone knows: id uniqueness, the vocabulary, the context length, a tokenizer for stops.
        PD disaggregation (``rollart.engine.kv_transfer``): ``request.kv`` holds the K/V of the prompt's first
        tokens, installed into this cache at admission instead of computed; ``request.export_kv`` ("frames" |
        "ipc" | "auto") asks for the prompt's K/V in the result.
        """
        request_id, sampling, kv, export_kv = request.request_id, request.sampling, request.kv, request.export_kv
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in flight; ids must be unique")
        prompt = list(request.prompt_token_ids)
        if not prompt:
            raise InvalidRequestError(f"request {request_id!r}: empty prompt (need at least one token)")
        vocab = self.model.config.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            bad = next(t for t in prompt if not 0 <= t < vocab)
            raise InvalidRequestError(f"request {request_id!r}: token id {bad} is outside the vocabulary [0, {vocab})")
        if len(prompt) >= self.max_model_len:
            raise InvalidRequestError(f"request {request_id!r}: prompt has {len(prompt)} tokens but max_model_len is "
                                      f"{self.max_model_len} (no room to generate); shorten it or raise max_model_len")
        seed = sampling.seed if sampling.seed is not None else self._rng.getrandbits(63)
        if export_kv and export_kv not in TRANSPORTS:
            raise InvalidRequestError(f"request {request_id!r}: export_kv={export_kv!r}; choose one of {TRANSPORTS}")
        imported = unpack(kv, self.model.config, len(prompt), request_id, self.version) if kv is not None else None
        seq = Sequence(request_id, prompt, sampling, torch.Generator().manual_seed(seed), seed=seed)
        seq.imported_kv, seq.export_kv = imported, export_kv
        seq.imported_kv_tokens = kv.num_tokens if imported is not None else 0
        if sampling.stop:
            if self.tokenizer is None:
                raise InvalidRequestError(f"request {request_id!r}: stop strings need a tokenizer; use stop_token_ids")
            seq.stop_checker = StopStringChecker(self.tokenizer, sampling.stop)
        self.requests[request_id] = seq
        self.scheduler.add(seq)
        self._stats.requests_added += 1
        self._stats.prompt_tokens += len(prompt)

    def abort_request(self, request_id: str) -> bool:
        """Stop a request and free its blocks. Idempotent: unknown or finished ids return False."""
        seq = self.requests.pop(request_id, None)
        if seq is None:
            return False
        self.scheduler.finish(seq, "abort")
        self._stats.aborted += 1
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.requests)

    # ---- stepping --------------------------------------------------------------------------------
    def step(self) -> list[GenerationResult]:
        """One scheduler step; returns the requests that finished in it."""
        if self.runner.kv_cache is None:
            raise RuntimeError("engine step while the KV cache is released: reclaim_kv() first")
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return []
        for seq in batch.seqs:
            if seq.imported_kv is not None:                                  # admitted now: fill its blocks
                t0 = time.perf_counter()
                self.runner.install_kv(seq.block_table, seq.imported_kv, seq.imported_kv_tokens)
                self.kv_seconds["install"] += time.perf_counter() - t0
                seq.imported_kv = None
        self._stats.steps += 1
        rows = [r for r, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens))
                if seq.num_computed_tokens + n == seq.num_tokens]
        logits = self.runner.run(batch, rows)                                # (len(rows), V)
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            seq.num_computed_tokens += n
            self.block_manager.commit_full_blocks(seq)
        if not rows:
            return []
        sampled = [batch.seqs[r] for r in rows]
        tokens, logprobs = self.runner.sample(logits, sampled)
        finished = []
        for seq, token, lp in zip(sampled, tokens, logprobs):
            seq.token_ids.append(token)
            seq.logprobs.append(lp)
            seq.versions.append(self.version)
            self._stats.generated_tokens += 1
            try:
                reason = self._check_stop(seq, token)
            except Exception as e:  # a broken tokenizer must not take the other requests down
                reason, seq.finish_reason = "error", f"{type(e).__name__}: {e}"
            if reason is not None:
                finished.append(self._finish(seq, reason))
        return finished

    def _check_stop(self, seq: Sequence, token: int) -> str | None:
        sp = seq.sampling
        stop_string = seq.stop_checker is not None and seq.stop_checker.append(seq.output_token_ids) is not None
        if seq.num_output_tokens >= sp.min_tokens and (
                stop_string or token in sp.stop_token_ids or (not sp.ignore_eos and token in self.eos_token_ids)):
            return "stop"
        if seq.num_output_tokens >= sp.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _finish(self, seq: Sequence, reason: str) -> GenerationResult:
        error = seq.finish_reason if reason == "error" else ""
        kv = None
        if seq.export_kv and not error and seq.num_computed_tokens >= seq.num_prompt_tokens:  # before its blocks go
            t0 = time.perf_counter()
            kv = self._kv_exporter.pack(self.runner.export_kv(seq.block_table, seq.num_prompt_tokens),
                                        seq.num_prompt_tokens, seq.export_kv, self.version)
            self.kv_seconds["export"] += time.perf_counter() - t0
        self.scheduler.finish(seq, reason)
        del self.requests[seq.request_id]
        out = seq.output_token_ids
        text = ""
        if self.tokenizer is not None and not error:
            try:
                text = self.tokenizer.decode(out, skip_special_tokens=True)
            except Exception:  # the tokens are the result; text is a convenience
                text = ""
        return GenerationResult(out, seq.logprobs, seq.versions, reason, text, num_prompt_tokens=seq.num_prompt_tokens,
                                num_cached_tokens=seq.num_cached_tokens or 0, request_id=seq.request_id, error=error,
                                kv=kv)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams] | None = None) -> list[GenerationResult]:
        """Convenience for scripts and tests, outside the Engine protocol: each prompt becomes one
        ``GenerateRequest`` through ``add_request``, run to completion; outputs in prompt order."""
        params = sampling if isinstance(sampling, list) else [sampling or SamplingParams()] * len(prompts)
        ids = [f"gen-{self._stats.requests_added + i}" for i in range(len(prompts))]
        for rid, p, sp in zip(ids, prompts, params):
            self.add_request(GenerateRequest(rid, p, sp))
        done: dict[str, GenerationResult] = {}
        while len(done) < len(ids):
            for out in self.step():
                done[out.request_id] = out
        return [done[r] for r in ids]

    # ---- weights ---------------------------------------------------------------------------------
    def update_weights(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
        """Load new weights (HF names; all checked before any is copied) and move to ``weights.version``.

        A version of LoRA adapters only (``engine.lora``; ``rollart.engine.lora_weights``) is merged onto the base
        weights the engine keeps, replacing the version before. In-flight requests keep their tokens; their K/V is
        dropped and recomputed under the new weights before they decode again. Without ``namespace`` the whole
        prefix cache is dropped. With one (the job these weights belong to, on an engine that jobs share) only that
        namespace's cached prefixes are dropped, the other namespaces' stay cached for when their weights come
        back, and ``namespace`` becomes current; ``reuse_cached=True`` says these are exactly the weights its
        cached prefixes were computed with (a job swapped back in unchanged): they are kept and match again.
        """
        if holds_adapters(weights):
            self.lora.apply(self.lora.check(weights))
        else:
            self._load_whole(weights)
        self.runner.repack()
        self.version = weights.version
        self._stats.weight_updates += 1
        self._stats.recomputed_tokens += self.scheduler.reset_all(reset_prefix_cache=namespace is None)
        self.block_manager.set_namespace(namespace)
        if namespace is not None and not reuse_cached:
            self.block_manager.drop_namespace(namespace)

    def _load_whole(self, weights: WeightBucket) -> None:
        params = dict(self.model.named_parameters())
        tied = self.model.config.tie_word_embeddings
        items = []
        for name, tensor in weights.named_tensors():
            if name == "lm_head.weight" and tied:
                continue
            if name not in params:
                raise KeyError(f"update_weights: unknown weight {name!r} (expected HF names like 'model.norm.weight')")
            if tuple(tensor.shape) != tuple(params[name].shape):
                raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}, model expects {tuple(params[name].shape)}")
            items.append((params[name], tensor))
        with torch.no_grad():
            for p, t in items:
                p.copy_(t)
        self.lora.rebase(set(weights.tensors))

    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        return list(self.model.named_parameters())

    def reset_prefix_cache(self) -> None:
        self.block_manager.reset_prefix_cache()

    @property
    def kv_released(self) -> bool:
        return self.runner.kv_cache is None

    def release_kv(self) -> int:
        """Free the KV cache's memory (the prefix cache goes with it); the bytes freed. Requests unfinished are
        aborted: their K/V goes with the cache."""
        for request_id in list(self.requests):
            self.abort_request(request_id)
        self.block_manager.reset_prefix_cache()
        return self.runner.release()

    def reclaim_kv(self) -> int:
        """Allocate the KV cache again (as many blocks as before, empty) after ``release_kv``; the bytes held."""
        if self.runner.kv_cache is None:
            self.runner.allocate(self.num_blocks, self.max_model_len)
        return self.runner.kv_cache.numel() * self.runner.kv_cache.element_size()

    def stats(self) -> EngineStats:
        s = self._stats
        s.prefix_hit_tokens = self.scheduler.stats.prefix_hit_tokens
        s.computed_prompt_tokens = self.scheduler.stats.computed_prompt_tokens
        s.preemptions = self.scheduler.stats.preemptions
        s.extra = {"imported_kv_tokens": self.scheduler.stats.imported_kv_tokens,
                   "forward_tokens": self.runner.forward_tokens, "kv_export_s": self.kv_seconds["export"],
                   "kv_install_s": self.kv_seconds["install"], "num_kv_blocks": self.num_blocks, "free_kv_blocks": self.block_manager.num_free_blocks,
                   "running": len(self.scheduler.running), "waiting": len(self.scheduler.waiting)}
        return s
