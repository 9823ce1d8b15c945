"""The parts a run holds besides its actors, opened at its start and closed at its end whatever happened:
scoring and actions, the sample buffer, the env managers (behind the agent gateway for agent tasks), held-out
evaluation, the rollout scheduler, weight sync and recovery; and the workers' and devices' stats read at the end.
Mixed into ``Coordinator``, whose state it uses."""
from __future__ import annotations

import logging
from typing import Any

from rollart.gateway.agent_task import AgentRunner, TaskRunner, start_gateway
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.heldout import HeldOutEval
from rollart.pipeline.recovery import Recovery
from rollart.pipeline.scoring import Scoring, run_actions
from rollart.pipeline.weights import WeightSync
from rollart.rollout.buffer import SampleBuffer
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager
from rollart.rollout.scheduler import RolloutScheduler

log = logging.getLogger("rollart.pipeline")


class RunParts:
    async def _open_parts(self, cfg: PipelineConfig, tokenizer: Any) -> None:
        """Every part the loops use, on top of the run's actors (``self.c``)."""
        self.actions = run_actions(cfg)
        self.scoring = await Scoring.start(cfg, tokenizer, self.reward_fn, self.actions)
        self.buffer = SampleBuffer(cfg.buffer)
        pool = self.env_pool or self.c.env_pool or EnvPool.inprocess()
        manager = EnvManager(self.c.proxy, tokenizer, pool, gate=self.buffer, actions=self.actions)
        self.eval_manager = EnvManager(self.c.proxy, tokenizer, pool, gate=None, actions=self.actions)
        self.gateway = await start_gateway(self.c.proxy, tokenizer, [*self.tasks, *self.eval_tasks])
        if self.gateway is not None:  # agent tasks: run through the OpenAI-compatible gateway
            manager = TaskRunner(manager, AgentRunner(self.gateway, gate=self.buffer))
            self.eval_manager = TaskRunner(self.eval_manager, AgentRunner(self.gateway))
        self.heldout = HeldOutEval(self.eval_manager, self.heldout_tasks, cfg.heldout_episodes, cfg.eval_every,
                                   lambda: self.c.proxy.version, self._log_eval)
        self.scheduler = RolloutScheduler(self.tasks, manager, cfg.rollout, buffer=self.buffer,
                                          rewards=self.scoring.dispatcher)
        self.weights = WeightSync(self.c.trainer, self.c.store, self.c.proxy, cfg.bucket_bytes,
                                  cfg.weight_link_bytes_per_s, cfg.weights)
        self.weights.store_moved.append(self.c.repoint_store)
        self.recovery = Recovery(self.c.trainer, self.c.store, self.weights, self.buffer, self.c.proxy,
                                 self.run_dir / "checkpoints", cfg.alpha)

    async def _close_parts(self) -> None:
        """Close what the run opened, those it got to before a failure included."""
        if getattr(self, "heldout", None) is not None:
            await self.heldout.cancel()
        if getattr(self, "gateway", None) is not None:
            await self.gateway.close()
        if getattr(self, "bar", None) is not None:
            self.bar.close()
        if self.logger is not None:
            self.logger.close()
        await self.c.close()
        if self.scoring is not None:
            await self.scoring.close()
        if getattr(self, "actions", None) is not None:
            await self.actions.close()

    async def _device_stats(self) -> dict:
        """Device and peak GPU memory of the trainer and of each worker that reports them (diagnostics)."""
        out = {name: {k: st[k] for k in ("device", "peak_memory_gb") if k in st}
               for name, st in self.worker_stats.items() if "peak_memory_gb" in st}
        try:
            out["trainer"] = await self.c.trainer.call("device_stats")
        except Exception as e:  # noqa: BLE001 - e.g. a shared training service that does not answer it
            log.info("trainer device stats: %s", e)
        return out

    async def _worker_stats(self) -> dict:
        """Each inference worker's counters; with simulated hardware, warn if the real compute was not
        well below the simulated time (then the CPU, not the simulated class, set the worker's speed)."""
        stats = {}
        for name, hw, handle in self.c.workers:
            try:
                stats[name] = {"hw_class": hw, **await handle.call("get_stats")}
            except Exception as e:  # noqa: BLE001 - stats are diagnostics; a dead worker must not fail the run
                log.warning("stats of worker %s: %s", name, e)
        for name, st in stats.items():
            simulated = st.get("simulated_scaled_seconds", 0.0)
            if self.cfg.simulate_hardware and simulated and st["engine_seconds"] > 0.5 * simulated:
                log.warning("worker %s: real engine compute %.1f s is %.0f%% of its simulated %s time %.1f s, "
                            "so this CPU, not the simulated hardware, set much of its speed; raise "
                            "sim_time_scale or give rollout more cores", name, st["engine_seconds"],
                            100 * st["engine_seconds"] / simulated, st["hw_class"], simulated)
        return stats
