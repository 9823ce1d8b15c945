"""The waits around restarting an inference worker whose node was lost, without Ray.

On Ray a worker whose node is gone restarts only once a node with free capacity of its class joins (the
launch waits for it, rollart.distributed.ray_backend). Meanwhile a message sent to it without a timeout waits
for that restart (``rollart.actors.calls._wait_ready``). The weight sync sends each live worker its pull and
its update that way: a publish or an update that started while the worker restarted stalled the run until the
capacity returned, although the run is meant to go on with the workers it has. Neither waits for it now (the
proxy probes it in the background and resyncs it when it is back). Here a worker "restarting" is a
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
