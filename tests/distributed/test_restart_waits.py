"""The waits around restarting an inference worker whose node was lost, without Ray.

On Ray a worker whose node is gone restarts only once a node with free capacity of its class joins (the
launch waits for it, rollart.distributed.ray_backend). Meanwhile a message sent to it without a timeout waits
for that restart (``rollart.actors.calls._wait_ready``). The weight sync sends each live worker its pull and
its update that way: a publish or an update that started while the worker restarted stalled the run until the
capacity returned, although the run is meant to go on with the workers it has. Neither waits for it now (the
proxy probes it in the background and resyncs it when it is back). A generation request routed to it (its class
has no other worker, or the trajectory's earlier turns ran there) stalled its trajectory, its group and, once
the groups allowed to be outstanding were all stalled, the run; it now waits for the restart at most
``restart_timeout_s`` and goes to a worker that answers. Here a worker "restarting" is a
real ``ActorHandle`` of a record in state ``restarting`` whose restart never completes, as while no node has
capacity.
"""
import asyncio
import types

import pytest

from rollart.actors.calls import PendingCalls
from rollart.actors.handle import ActorHandle
from rollart.actors.record import ActorRecord
from rollart.actors.restart import RestartPolicy
from rollart.distributed.cluster_config import ClusterConfig
from rollart.distributed.resources import ResourceManager
from rollart.messages import PullWeights, UpdateWeights, WaitWeights, WeightEndpoint
from rollart.types import GenerateRequest, GenerationResult

STALL_S = 2.0
"""Far longer than either call takes when it does not wait for the restarting worker."""


def restarting(name: str) -> ActorHandle:
    """The handle of an actor that died and whose restart is still waiting (for capacity)."""
    rec = ActorRecord(name, "rollart.inference.worker:InferenceWorker", [], {}, "process",
                      RestartPolicy(max_restarts=2), {}, state="restarting", restarts=1, started_once=True)
    rec.ready = asyncio.get_running_loop().create_future()  # resolved when an incarnation is ready: never here
    return ActorHandle(rec, PendingCalls(router=None), stop=None)


class Answering:
    """A live worker: answers at once, remembering what it was sent."""

    supervised, alive, restarts, dead_reason = True, True, 0, ""

    def __init__(self, name: str):
        self.name = name
        self.got: list = []

    async def send(self, message, timeout=None):
        self.got.append(message)
        if isinstance(message, PullWeights):
            return f"tcp://{self.name}-relay"
        if isinstance(message, WaitWeights):
            return {"seconds": 0.0}
        if isinstance(message, GenerateRequest):
            return GenerationResult(token_ids=[7], logprobs=[-0.1], versions=[0], finish_reason="stop",
                                    num_prompt_tokens=len(message.prompt_token_ids))
        return None

    def on_restart(self, callback) -> None:
        pass


async def test_starting_the_pulls_of_a_version_does_not_wait_for_a_restarting_worker():
    from rollart.rollout.worker_slot import WorkerSlot
    from rollart.weightplane.sync import WeightSync

    gen0 = Answering("gen-0")
    proxy = types.SimpleNamespace(workers={"gen-0": WorkerSlot("gen-0", "H800", gen0),
                                           "gen-1": WorkerSlot("gen-1", "H20", restarting("gen-1"))})
    sync = WeightSync(trainer=None, store=Answering("weight-store-0"), proxy=proxy, bucket_bytes=1 << 20)
    sync.store_address = "tcp://store"
    sync._workers = {"gen-0": WeightEndpoint("tcp://gen-0"), "gen-1": WeightEndpoint("tcp://gen-1")}
    await asyncio.wait_for(sync.start_pulls(1), STALL_S)  # the publish of version 1 waits on this
    assert isinstance(gen0.got[0], PullWeights) and gen0.got[0].version == 1  # the live worker pulls it


async def test_an_update_of_the_workers_does_not_wait_for_a_restarting_worker():
    from rollart.rollout.proxy import LLMProxy
    from rollart.rollout.proxy_config import ProxyConfig

    gen0 = Answering("gen-0")
    proxy = LLMProxy([("gen-0", "H800", gen0), ("gen-1", "H20", restarting("gen-1"))], ProxyConfig())
    await asyncio.wait_for(proxy.update_weights(UpdateWeights(1, source="tcp://store")), STALL_S)  # rollout suspended
    assert gen0.got == [UpdateWeights(1, source="tcp://store")]  # the live worker installs it


def two_class_proxy(**config):
    from rollart.rollout.proxy import LLMProxy
    from rollart.rollout.proxy_config import ProxyConfig

    gen0 = Answering("gen-0")
    proxy = LLMProxy([("gen-0", "H800", gen0), ("gen-1", "H20", restarting("gen-1"))],
                     ProxyConfig(restart_timeout_s=0.3, **config))
    return proxy, gen0


async def test_a_request_for_a_class_whose_only_worker_restarts_goes_to_a_fallback_after_restart_timeout():
    proxy, gen0 = two_class_proxy(hw_affinity={"Lake": "H20"})
    result = await asyncio.wait_for(proxy.generate("t0", [1, 2, 3], {"max_tokens": 1}, task="Lake"), STALL_S)
    assert result.worker == "gen-0" and result.finish_reason == "stop"
    assert proxy.workers["gen-1"].dead  # it did not come back within restart_timeout_s: out of routing
    assert [type(m) for m in gen0.got] == [GenerateRequest]


async def test_a_trajectory_stuck_to_a_restarting_worker_is_served_by_another():
    proxy, gen0 = two_class_proxy()
    proxy.router.remember("t0", "", proxy.workers["gen-1"])  # its earlier turns ran on gen-1
    result = await asyncio.wait_for(proxy.generate("t0", [1, 2, 3], {"max_tokens": 1}), STALL_S)
    assert result.worker == "gen-0"


async def test_an_abort_while_the_pick_restarts_ends_the_request():
    proxy, gen0 = two_class_proxy(hw_affinity={"Lake": "H20"})
    request = asyncio.ensure_future(proxy.generate("t0", [1, 2, 3], {"max_tokens": 1}, task="Lake"))
    await asyncio.sleep(0.05)  # waiting for gen-1's restart
    await asyncio.wait_for(proxy.abort("t0"), STALL_S)
    result = await asyncio.wait_for(request, STALL_S)
    assert result.finish_reason == "abort" and gen0.got == []


def test_a_restart_that_wakes_after_the_ray_backend_closed_fails_in_one_line():
    """Teardown removes the placement groups; a restart whose backoff ends after that says so (it raised
    KeyError('H20') before)."""
    pytest.importorskip("ray", reason="the ray backend needs Ray: pip install -e '.[ray]'")
    from rollart.distributed.ray_backend import RayBackend

    rm = ResourceManager({"H20": 1})
    rm.allocate("generate", "H20", owner="gen-1")
    backend = RayBackend(ClusterConfig(backend="ray"), rm, {"H20": [[0]]})  # never started: no placement group
    with pytest.raises(RuntimeError, match=r"actor gen-1 \(H20\) not started: the ray backend is closed"):
        backend._options("gen-1", {})
