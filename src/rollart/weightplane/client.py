"""Pulling a weight version from a BucketServer: pipelined, verified, retried, never half a version.

``pull_version`` asks its first source for the manifest, then keeps ``window`` bucket requests in flight
and hands each bucket, in order, to ``on_bucket`` once its size and CRC-32 check out; while ``on_bucket``
installs bucket k (relays it, stages it on the device) the next ones are already on the wire. A bucket
that does not arrive within ``timeout_s`` (lost), arrives with the wrong size or CRC (corrupt), or is
refused by the source is asked for again from the next source in ``sources`` (the relay parent first,
then the weight store); after ``retries`` failures of one bucket the pull raises ``WeightTransferError``
and the caller installs nothing of that version. ``timeout_s`` bounds each request, not the pull: a pull that
keeps receiving goes on however long it takes, one whose source stops answering fails after at most
``(retries + 1) x timeout_s`` with one line naming the version, the source (``names``) and ``weights.timeout_s``.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import zmq
import zmq.asyncio

from rollart.weightplane.buckets import WeightTransferError, check_manifest, crc
from rollart.weightplane.frames import Kind, Reply, request_frames
from rollart.weightplane.net import PlaneNet, plane_net

log = logging.getLogger("rollart.weightplane")


class BucketClient:
    """One DEALER connection to a BucketServer; concurrent requests matched to replies by id."""

    def __init__(self, address: str, ctx: zmq.asyncio.Context | None = None, net: PlaneNet | None = None):
        self.address = address
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        (net or plane_net()).secure_client(self.sock, address)
        self.sock.connect(address)
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None

    async def request(self, kind: bytes, *args: Any, timeout: float) -> tuple[Any, Any]:
        """(payload, data frame or None); raises TimeoutError, or WeightTransferError for an error reply."""
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read(), name=f"weights-from-{self.address}")
        req_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[req_id] = fut
        async def exchange() -> tuple[Any, Any]:
            # the send counts against the timeout too: with no peer connected (gone, or one that refused our
            # CURVE keys) a DEALER's send waits for one
            await self.sock.send_multipart(request_frames(kind, req_id, args))
            return await fut

        try:
            return await asyncio.wait_for(exchange(), timeout)
        finally:
            self._waiting.pop(req_id, None)

    async def _read(self) -> None:
        while True:
            reply = Reply.parse(await self.sock.recv_multipart(copy=False))
            if reply is None:
                continue  # a garbled reply is as good as a lost one: its request times out
            fut = self._waiting.get(reply.req_id)
            if fut is None or fut.done():
                continue  # the request timed out meanwhile
            if reply.kind == Kind.ERROR:
                fut.set_exception(WeightTransferError(f"{self.address}: {reply.payload}"))
            else:
                fut.set_result((reply.payload, reply.data))

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self.sock.close(linger=0)


async def latest_version(address: str, timeout_s: float, net: PlaneNet | None = None) -> int:
    """The newest complete version the server at ``address`` holds (-1: none); raises TimeoutError."""
    client = BucketClient(address, net=net)
    try:
        payload, _ = await client.request(Kind.LATEST, timeout=timeout_s)
        return int(payload["version"])
    finally:
        await client.close()


@dataclass
class PullStats:
    version: int
    num_buckets: int = 0
    bytes: int = 0
    seconds: float = 0.0
    retries: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    """Bytes received from each source address."""


OnBucket = Callable[[int, dict, Any, int], Awaitable[None]]
"""on_bucket(index, manifest entry, data frame (zmq.Frame), crc)."""


async def pull_version(version: int, sources: list[str], on_bucket: OnBucket, *,
                       on_manifest: Callable[[dict], None] | None = None, window: int = 2, timeout_s: float = 30.0,
                       retries: int = 3, link_bytes_per_s: float = 0.0, names: dict[str, str] | None = None,
                       ctx: zmq.asyncio.Context | None = None, net: PlaneNet | None = None) -> tuple[dict, PullStats]:
    """Fetch every bucket of ``version`` (see module docstring); returns (manifest, stats). ``names``: address ->
    who serves there (e.g. "the weight store"), for error lines.

    ``link_bytes_per_s`` > 0 *simulates* a slower link (sleeps bytes / rate per bucket; label it simulated)."""
    sources = [s for s in dict.fromkeys(sources) if s]
    if not sources:
        raise WeightTransferError(f"weight version {version}: no source address to pull it from")
    clients: dict[str, BucketClient] = {}
    stats = PullStats(version)
    cur = 0
    t0 = time.perf_counter()

    def client(address: str) -> BucketClient:
        if address not in clients:
            clients[address] = BucketClient(address, ctx, net)
        return clients[address]

    def fail(what: str, attempt: int, e: BaseException) -> None:
        nonlocal cur
        stats.retries += 1
        source = f"{(names or {}).get(sources[cur], 'the peer')} at {sources[cur]}"
        why = (f"no answer for {timeout_s:g} s (weights.timeout_s)" if isinstance(e, TimeoutError)
               else f"failed ({type(e).__name__}: {e})")
        msg = f"weight pull of version {version}: {what} from {source}: {why}"
        if attempt > retries:
            raise WeightTransferError(f"{msg}; gave up after {attempt} attempts: nothing of it is installed") from e
        cur = (cur + 1) % len(sources)
        log.warning("%s; retrying from %s", msg, sources[cur])

    pending: dict[int, tuple[str, asyncio.Task]] = {}
    try:
        attempt = 0
        while True:
            try:
                manifest, _ = await client(sources[cur]).request(Kind.MANIFEST, version, timeout=timeout_s)
                manifest = check_manifest(manifest, version)
                break
            except (TimeoutError, WeightTransferError, zmq.ZMQError) as e:
                attempt += 1
                fail("manifest", attempt, e)
        if on_manifest is not None:
            on_manifest(manifest)
        entries = manifest["buckets"]
        n = len(entries)

        def issue(k: int) -> None:
            address = sources[cur]
            task = asyncio.get_running_loop().create_task(
                client(address).request(Kind.BUCKET, version, k, timeout=timeout_s))
            pending[k] = (address, task)

        for k in range(min(window, n)):
            issue(k)
        for k in range(n):
            attempt = 0
            while True:
                address, task = pending.pop(k)
                try:
                    header, frame = await task
                    data_crc = _verify(version, k, entries[k], header, frame)
                    break
                except (TimeoutError, WeightTransferError, zmq.ZMQError) as e:
                    attempt += 1
                    fail(f"bucket {k}/{n}", attempt, e)
                    issue(k)
            if k + window < n:
                issue(k + window)
            nbytes = entries[k]["nbytes"]
            stats.bytes += nbytes
            stats.by_source[address] = stats.by_source.get(address, 0) + nbytes
            if link_bytes_per_s > 0:
                await asyncio.sleep(nbytes / link_bytes_per_s)
            await on_bucket(k, entries[k], frame, data_crc)
        stats.num_buckets = n
        stats.seconds = time.perf_counter() - t0
        return manifest, stats
    finally:
        for _, task in pending.values():
            task.cancel()
        await asyncio.gather(*(t for _, t in pending.values()), return_exceptions=True)
        for c in clients.values():
            await c.close()


def _verify(version: int, k: int, entry: dict, header: Any, frame: Any) -> int:
    """The bucket's CRC once its header, size and checksum match what the manifest promised."""
    if frame is None or not isinstance(header, dict):
        raise WeightTransferError(f"bucket {k} came without its data")
    if header.get("version") != version or header.get("index") != k:
        raise WeightTransferError(f"asked for bucket {k} of version {version}, got "
                                  f"{header.get('index')} of {header.get('version')}")
    size = len(frame.buffer) if hasattr(frame, "buffer") else memoryview(frame).nbytes
    if size != entry["nbytes"] or header.get("nbytes") != size:
        raise WeightTransferError(f"bucket {k} has {size} bytes, the manifest says {entry['nbytes']}")
    got = crc(frame.buffer if hasattr(frame, "buffer") else frame)
    if got != header.get("crc"):
        raise WeightTransferError(f"bucket {k} is corrupt (CRC-32 {got:#010x}, sender said {header.get('crc'):#x})")
    return got
