"""Covers the weight plane over real ZeroMQ sockets: a relay chain and tree end with the trainer's exact
weights while the store sends one model; lost and corrupt buckets are retried or fail loudly, never half a version."""
import asyncio

import pytest
import torch

from rollart.weightplane import BucketServer, WeightRelay, WeightSource, WeightTransferError, pull_version


def _named(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    out = [(f"layer{i}.weight", torch.randn(64, 48, generator=g)) for i in range(n)]
    return out + [("norm.weight", torch.randn(48, generator=g).to(torch.bfloat16)), ("step", torch.arange(5))]


async def _publish(src, named, version, bucket_bytes=16 << 10):
    return await src.publish(version, named, bucket_bytes)


@pytest.mark.parametrize("fanout", [1, 2])
async def test_relay_tree_ends_with_the_trainers_weights_and_the_store_sends_one_model(fanout):
    named = _named()
    src, store = WeightSource(), WeightRelay(stage=False, keep_versions=2)
    workers = [WeightRelay() for _ in range(5)]
    for x in (src, store, *workers):
        await x.start()
    try:
        pub = asyncio.ensure_future(_publish(src, named, 1))
        store.pull(1, [src.address])
        for j, w in enumerate(workers):  # each pulls from its parent while the parent is still receiving
            parent = store.address if j == 0 else workers[(j - 1) // fanout].address
            w.pull(1, [parent, store.address])
        info = await pub
        await store.take(1)
        results = [await w.take(1) for w in workers]
        for bucket, stats in results:
            assert bucket.version == 1 and list(bucket.tensors) == [n for n, _ in named]
            for name, t in named:
                assert bucket.tensors[name].dtype == t.dtype and torch.equal(bucket.tensors[name], t), name
            assert stats.retries == 0 and stats.bytes == info["bytes"]
        model = info["bytes"]
        assert info["num_buckets"] > 3
        assert src.server.bytes_sent == model  # the trainer fed the store only
        assert store.server.bytes_sent == model  # the store fed one worker, whatever the number of workers
        assert max(w.server.bytes_sent for w in workers) <= fanout * model
        assert sum(w.server.bytes_sent for w in workers) == (len(workers) - 1) * model
    finally:
        for x in (src, store, *workers):
            await x.close()


class FlakyServer(BucketServer):
    """Loses or corrupts chosen buckets in transit (the test's only hook into the server)."""

    def __init__(self, lose=(), corrupt=(), times=1):
        super().__init__(wait_s=5.0)
        self.lose, self.corrupt, self.times = set(lose), set(corrupt), times
        self.hits = 0

    def serve_bucket(self, version, index, payload, crc):
        if self.hits < self.times and index in self.lose:
            self.hits += 1
            return None
        if self.hits < self.times and index in self.corrupt:
            self.hits += 1
            bad = bytearray(payload)
            bad[len(bad) // 2] ^= 0xFF
            return bad, crc
        return payload, crc


async def _serve(server, named, version=3):
    src = WeightSource()
    src.server = server
    await src.start()
    await src.publish(version, named, 16 << 10)
    return src


async def _pull_all(address, version=3, sources=None, **kw):
    got = {}

    async def on_bucket(k, entry, frame, crc):
        got[k] = bytes(frame.buffer)

    manifest, stats = await pull_version(version, sources or [address], on_bucket, **kw)
    return got, stats


@pytest.mark.parametrize("fault", ["lose", "corrupt"])
async def test_a_lost_or_corrupt_bucket_is_asked_for_again(fault, caplog):
    named = _named(1)
    src = await _serve(FlakyServer(**{fault: {2}}), named)
    try:
        got, stats = await _pull_all(src.address, timeout_s=0.5, retries=2)
        assert stats.retries == 1 and len(got) == stats.num_buckets
        ref, _ = await _pull_all(src.address)
        assert got == ref
        assert ("no answer for 0.5 s (weights.timeout_s)" in caplog.text if fault == "lose"
                else "corrupt" in caplog.text)
    finally:
        await src.close()


async def test_a_bucket_corrupt_at_every_try_fails_loudly_and_nothing_is_staged():
    named = _named(2)
    src = await _serve(FlakyServer(corrupt={1}, times=100), named)
    worker = WeightRelay(timeout_s=0.5, retries=2)
    await worker.start()
    try:
        worker.pull(3, [src.address])
        with pytest.raises(WeightTransferError, match="bucket 1/.*corrupt.*gave up after 3 attempts"):
            await worker.take(3)
        assert not worker.server.held(3)  # nothing of that version is served on, or handed out
    finally:
        await worker.close()
        await src.close()


async def test_a_corrupt_parent_is_bypassed_through_the_store():
    named = _named(3)
    store_src = await _serve(BucketServer(), named)  # the store: intact
    bad_parent = await _serve(FlakyServer(corrupt={0, 1, 2, 3}, times=100), named)
    worker = WeightRelay(timeout_s=0.5, retries=4)
    await worker.start()
    try:
        worker.pull(3, [bad_parent.address, store_src.address])
        bucket, stats = await worker.take(3)
        assert stats.retries >= 1 and stats.by_source.get(store_src.address, 0) > 0
        for name, t in named:
            assert torch.equal(bucket.tensors[name], t)
    finally:
        for x in (worker, store_src, bad_parent):
            await x.close()


async def test_asking_for_a_version_nobody_holds_is_an_error_not_a_hang():
    server = BucketServer(wait_s=0.3)
    await server.start()
    try:
        with pytest.raises(WeightTransferError, match="version 9.*(did not arrive|gave up)"):
            await _pull_all(server.address, version=9, timeout_s=2.0, retries=0)
    finally:
        await server.close()


async def test_a_failed_background_pull_is_retried_from_the_store_at_install():
    named = _named(4)
    store_src = await _serve(BucketServer(), named)
    worker = WeightRelay(timeout_s=0.3, retries=0)
    await worker.start()
    try:
        worker.pull(3, ["tcp://127.0.0.1:1"])  # a parent that is gone: the background pull fails
        with pytest.raises(WeightTransferError):
            await worker.wait(3)
        bucket, _ = await worker.take(3, [store_src.address])  # the install pulls it from the store itself
        assert all(torch.equal(bucket.tensors[n], t) for n, t in named)
    finally:
        await worker.close()
        await store_src.close()


async def test_an_ipc_request_waits_for_the_descriptors_that_follow_the_manifest():
    """The trainer announces a version's manifest, copies its buckets, and only then sets their CUDA IPC handles: an
    inference worker that asks in between waits for them (on the first GPU run it got 'no CUDA IPC buckets' and
    fell back to host frames every time). A version completed without them is an error, not a wait."""
    from rollart.weightplane.client import BucketClient
    from rollart.weightplane.frames import Kind
    server = BucketServer(wait_s=5.0)
    await server.start()
    client = BucketClient(server.address)
    try:
        server.begin(1, {"version": 1, "bytes": 0, "buckets": []})
        asking = asyncio.ensure_future(client.request(Kind.IPC, 1, timeout=5.0))
        await asyncio.sleep(0.2)
        assert not asking.done()
        server.set_ipc(1, [{"handle": "h0"}])
        server.complete(1)
        descriptors, _ = await asking
        assert descriptors == [{"handle": "h0"}]
        server.begin(2, {"version": 2, "bytes": 0, "buckets": []})
        server.complete(2)
        with pytest.raises(WeightTransferError, match="version 2 was published here without CUDA IPC buckets"):
            await client.request(Kind.IPC, 2, timeout=5.0)
    finally:
        await client.close()
        await server.close()
