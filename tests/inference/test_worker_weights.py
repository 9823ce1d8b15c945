"""InferenceWorker on the weight plane, as real processes: it starts holding the store's newest version, a worker
killed with SIGKILL comes back and pulls the latest version from the store itself (no coordinator involved), and
a version that cannot be pulled intact is never installed."""
import asyncio
import os
import signal

from rollart.actors import ActorSystem, RestartPolicy
from rollart.inference.worker import InferenceWorker
from rollart.weightplane.store import WeightStore
from rollart.types import UpdateWeights, WeightBucket
from rollart.weightplane.buckets import digest
from rollart.weightplane.server import fixed_address
from rollart.messages import GetVersion, PublishVersion, PutBucket, WeightAddress, WeightsDigest

async def _publish(store, version, weights):
    store.put_bucket(PutBucket(WeightBucket.of(version, weights)))
    store.publish(PublishVersion(version, 1))

async def test_a_worker_starts_on_and_after_sigkill_returns_with_the_stores_latest_version(engine_config,
                                                                                          tiny_weights_v2):
    store = WeightStore(bind=fixed_address())
    await store.on_start()
    address = await store.weight_address(WeightAddress())
    v3 = {k: v * 0.5 for k, v in tiny_weights_v2.items()}
    await _publish(store, 2, tiny_weights_v2)
    try:
        async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=3.0, spawn_timeout=300) as system:
            worker = await system.spawn(InferenceWorker, engine_config, name="w0", weight_store=address,
                                        restart=RestartPolicy(max_restarts=1, backoff=0.05))
            assert await worker.send(GetVersion()) == 2  # caught up with the store before serving
            await _publish(store, 3, v3)  # the store moves on; the worker is idle, nobody tells it
            served = store.bytes_served()
            first_pid = worker.pid
            os.kill(first_pid, signal.SIGKILL)
            async with asyncio.timeout(240):  # a restart re-imports torch: slow on a loaded machine
                while not (worker.restarts == 1 and worker.state == "ready"):
                    await asyncio.sleep(0.05)
            assert worker.pid != first_pid
            assert await worker.send(GetVersion()) == 3 and store.bytes_served() > served
            got = await worker.send(WeightsDigest())
            want = digest(v3.items())
            assert got and all(want[k] == c for k, c in got.items() if k in want)
    finally:
        await store.on_stop()

async def test_a_version_the_store_does_not_hold_is_refused_and_nothing_changes(engine_config):
    store = WeightStore()
    await store.on_start()
    try:
        async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
            worker = await system.spawn(InferenceWorker, engine_config, name="w0", mode="inprocess")
            before = await worker.send(WeightsDigest())
            source = await store.weight_address(WeightAddress())
            store.relay.server.wait_s = 0.2  # not announced anywhere: the store says so at once
            try:
                await worker.send(UpdateWeights(7, source=source))
                raise AssertionError("an unavailable version was installed")
            except Exception as e:  # noqa: BLE001 - the remote WeightTransferError, by name
                assert "WeightTransferError" in repr(e) or "version 7" in str(e), e
            assert await worker.send(GetVersion()) == 0
            assert await worker.send(WeightsDigest()) == before
    finally:
        await store.on_stop()
