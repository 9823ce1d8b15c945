"""Covers the pieces of actor recovery without processes: the buffer's rewind by the α rule, the store's
rewind, restart settings reaching the actors, and the --resume command a lost actor names."""
import asyncio
import sys

import pytest
import torch

from recipes.launch import resume_command
from rollart.pipeline import PipelineConfig
from rollart.pipeline.run_actors import start_actors
from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.weightplane.store import WeightStore
from rollart.types import Trajectory, WeightBucket
from rollart.messages import GetStats, PublishVersion, PutBucket, RewindVersions


def group(gid: str, token_versions: list[int], start: int = 0) -> list[Trajectory]:
    return [Trajectory(f"{gid}-{i}", gid, "t", start_version=start, status="done", token_ids=[1] * len(token_versions),
                       versions=list(token_versions), loss_mask=[1] * len(token_versions)) for i in range(2)]


async def test_rewind_keeps_samples_within_alpha_of_the_checkpoint_and_drops_newer_ones():
    buf = SampleBuffer(BufferConfig(group_size=2, capacity=8, alpha=1), version=4)
    await buf.put(group("gone", [3, 4], start=3))   # newest token 4 > 2 + 1: from weights that are gone
    await buf.put(group("near", [3, 3], start=3))   # newest token 3 = 2 + 1: kept
    kept, dropped = await buf.rewind(2)
    assert (kept, dropped) == (2, 2) and buf.version == 2
    assert buf.evicted["rewound"] == 2 and buf.accounting_ok()
    assert [t.group_id for t in await buf.get_batch(2)] == ["near", "near"]


def test_store_rewind_forgets_newer_versions_so_the_checkpoint_publishes_again():
    store = WeightStore(keep_versions=3)
    for v in (3, 4, 5):
        store.put_bucket(PutBucket(WeightBucket(v, {"w": torch.zeros(2)}, 0)))
        store.publish(PublishVersion(v, 1))
    assert store.rewind(RewindVersions(4)) == 2 and store.latest_version() == 3
    store.put_bucket(PutBucket(WeightBucket(4, {"w": torch.ones(2)}, 0)))
    store.publish(PublishVersion(4, 1))
    assert store.latest_version() == 4


async def test_restart_settings_reach_the_actors(tmp_path):
    cfg = PipelineConfig(actor_mode="inprocess", trainer_restarts=3, weight_store_restarts=1, env_hosts=2,
                         env_host_restarts=5, batch_groups=1, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
                         logdir=str(tmp_path))
    from rollart.pipeline.prepare import prepare_run
    cfg = prepare_run(cfg).config
    c = await start_actors(cfg)
    try:
        policies = {cl.name: cl.restart.max_restarts for cl in c.clusters}
        assert policies == {"gen": 2, "weight-store": 1, "envhost": 5, "trainer": 3}
        assert len(c.env_pool.hosts) == 2
        assert [await h.send(GetStats()) for h in c.env_pool.host_objects][0]["live_envs"] == 0
    finally:
        await c.close()


def test_resume_command_repeats_the_command_line_with_resume(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["recipes/grpo_frozenlake.py", "logdir=/tmp/x y", "resume=false", "seed=3"])
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None)
    assert resume_command() == "python recipes/grpo_frozenlake.py 'logdir=/tmp/x y' seed=3 --resume"


def test_checkpoint_every_s_saves_between_step_checkpoints_and_env_hosts_serve_the_run(tmp_path):
    from recipes.grpo_frozenlake import TASK
    from rollart.pipeline import Coordinator
    from run_configs import recipe_config
    cfg = recipe_config(tmp_path, "total_steps=2", "actor_mode=inprocess", "checkpoint_every=0",
                        "checkpoint_every_s=1e-9", "keep_checkpoints=0", "env_hosts=1")
    co = Coordinator(cfg, [TASK])
    result = asyncio.run(co.run())
    assert result.version == 2
    assert (tmp_path / "grpo_frozenlake" / "checkpoints" / "step_00000001").is_dir()  # by time, not by steps
    assert co.parts.actors.env_pool.counters["opened"] > 0 and co.parts.scheduler.counters["failed"] == 0


def test_a_rollout_stopped_by_dead_workers_names_their_death_first():
    from types import SimpleNamespace as NS
    from rollart.rollout.proxy import LLMProxy
    slot = NS(name="gen-0", dead=True, handle=NS(dead_reason="process 7 exited with code -9"))
    proxy = NS(workers={"gen-0": slot})
    assert LLMProxy.all_dead_cause(proxy) == "every inference worker is dead (gen-0: process 7 exited with code -9)"
    slot.dead = False
    assert LLMProxy.all_dead_cause(proxy) == ""


@pytest.mark.timeout(30)
def test_waiting_for_a_restart_lets_the_runtime_run():
    """A send to a dead process fails at once; the wait must yield so the runtime can notice and restart it."""
    from rollart.actors import ActorDeadError
    from rollart.pipeline.recovery import wait_back

    class Restarting:
        name, alive, restarted, probes = "trainer-0", True, False, 0

        async def send(self, message, timeout=None):
            self.probes += 1
            if not self.restarted:
                raise ActorDeadError(self.name, "Host unreachable")

    async def main():
        handle = Restarting()
        asyncio.get_running_loop().call_later(0.2, setattr, handle, "restarted", True)  # the runtime's restart
        await wait_back(handle, ActorDeadError("trainer-0", "killed"))
        return handle.probes

    assert 2 <= asyncio.run(main()) < 50
