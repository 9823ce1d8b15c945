"""SIMULATED: an Engine whose steps last what ``rollart.hardware.SpeedModel`` says they would on the hardware
class it stands for (``simulate_hardware=true``; every figure from it is labelled simulated).

    engine = SimulatedSpeedEngine(LLMEngine(cfg), SpeedModelConfig(hw_class="H20", time_scale=0.01))

It wraps any ``rollart.engine.protocol.Engine`` and is one itself: requests, weights and stats pass through.
Each ``step()`` runs the real step, reads the work it did from the engine's counters (prompt tokens computed,
tokens generated; contexts estimated from the requests in flight), and then sleeps for what is left of the
simulated step time (``SpeedModel.step_seconds`` x ``time_scale`` minus the real step's seconds; no sleep
when the real step was slower). The inference worker calls ``step()`` in its engine thread,
so the sleep holds that thread only: the actor's event loop keeps answering calls meanwhile, and commands
wait for the step to end as they wait for any step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from rollart.engine.protocol import Engine
from rollart.hardware import SpeedModel, SpeedModelConfig, StepWork
from rollart.sim.engine_wrapper import EngineWrapper
from rollart.types import GenerateRequest, GenerationResult


@dataclass
class _InFlight:
    num_prompt_tokens: int
    max_tokens: int
    steps: int = 0
    """Engine steps taken since it was added (estimates its context length)."""


class SimulatedSpeedEngine(EngineWrapper):
    """Args:
        engine: the real engine, stepped as it is.
        speed: the hardware class and model shape whose step time is simulated (a dict crosses processes).
    """

    def __init__(self, engine: Engine, speed: SpeedModelConfig | dict) -> None:
        super().__init__(engine)
        self.speed = SpeedModel(SpeedModelConfig(**speed) if isinstance(speed, dict) else speed)
        self._inflight: dict[str, _InFlight] = {}
        self.engine_seconds = 0.0
        """Real seconds spent in the wrapped engine's steps."""
        self.simulated_seconds = 0.0
        """Paper-scale hardware seconds of those steps."""
        self.simulated_scaled_seconds = 0.0
        """Simulated seconds x time_scale: what the steps last here."""

    def add_request(self, request: GenerateRequest) -> None:
        self.inner.add_request(request)
        self._inflight[request.request_id] = _InFlight(len(request.prompt_token_ids), request.sampling.max_tokens)

    def abort_request(self, request_id: str) -> bool:
        self._inflight.pop(request_id, None)
        return self.inner.abort_request(request_id)

    # ---- the simulated step --------------------------------------------------------------------
    def step(self) -> list[GenerationResult]:
        before = self.inner.stats()
        prefilled, decoded = before.computed_prompt_tokens, before.generated_tokens  # stats() may be live
        t0 = time.perf_counter()
        outputs = self.inner.step()
        real = time.perf_counter() - t0
        after = self.inner.stats()
        work = self._work(after.computed_prompt_tokens - prefilled, after.generated_tokens - decoded)
        simulated = self.speed.step_seconds(work)
        scaled = simulated * self.speed.cfg.time_scale
        self.engine_seconds += real
        self.simulated_seconds += simulated
        self.simulated_scaled_seconds += scaled
        for out in outputs:
            self._inflight.pop(out.request_id, None)
        if scaled > real:
            time.sleep(scaled - real)
        return outputs

    def seconds(self) -> dict[str, float]:
        """Where the steps' time went: real engine seconds, simulated and scaled simulated seconds."""
        return {"engine_seconds": self.engine_seconds, "simulated_seconds": self.simulated_seconds,
                "simulated_scaled_seconds": self.simulated_scaled_seconds}

    def _work(self, prefill: int, decode: int) -> StepWork:
        """This step's work (prompt tokens computed, tokens generated); contexts estimated from what is in flight."""
        contexts = []
        for e in self._inflight.values():
            e.steps += 1
            contexts.append(e.num_prompt_tokens + min(e.steps, e.max_tokens))
        mean_ctx = sum(contexts) / len(contexts) if contexts else 0.0
        return StepWork(prefill_tokens=prefill, prefill_context=mean_ctx / 2 if prefill else 0.0,
                        decode_seqs=decode, decode_context_tokens=int(mean_ctx * decode))
