"""BucketServer: serves the weight versions one process holds, bucket by bucket, over a ZeroMQ ROUTER.

Requests come from DEALERs; every reply echoes the request id (the wire: ``frames``; no pickle).

A version may be served while it is still arriving (a relay): ``begin`` announces its manifest, each ``put``
makes one bucket servable at once, and a request for a bucket not yet there waits for it (``fail`` wakes the
waiters with an error, so a child falls back to another source at once instead of timing out). A request
for a version announced nowhere yet waits up to ``wait_s`` for ``begin``: a child may ask before its parent
got the announcement itself.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from rollart.actors.curve import is_loopback
from rollart.weightplane.frames import Kind, Reply, Request, reply_frames
from rollart.weightplane.net import PlaneNet, plane_net

log = logging.getLogger("rollart.weightplane")


@dataclass
class _Version:
    manifest: dict | None = None
    buckets: dict[int, tuple[Any, int]] = field(default_factory=dict)
    """index -> (bytes-like payload, crc)."""
    complete: bool = False
    error: str = ""
    ipc: list | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


def fixed_address(host: str = "127.0.0.1") -> str:
    """A ``tcp://host:port`` with a port free now, for a server whose address must outlive its process: a
    restarted weight store binds it again, and a restarted worker, given it at construction, finds it."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return f"tcp://{host}:{s.getsockname()[1]}"


class BucketServer:
    """Serve the versions this process holds (see module docstring). Run it on the process's event loop."""

    def __init__(self, bind: str | None = None, keep_versions: int = 1, wait_s: float = 60.0,
                 ctx: zmq.asyncio.Context | None = None, net: PlaneNet | None = None):
        """``bind``: default ``net``'s host, any port; ``net``: default this actor process's (``plane_net``)."""
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.net = net or plane_net()
        self.bind = bind or self.net.bind
        if self.net.curve_dir is None and not is_loopback(self.bind):
            raise ValueError(f"a weight server on {self.bind} would serve beyond this host unencrypted: bind "
                             "loopback, or give it a PlaneNet with the run's CURVE keys")
        self.keep_versions = keep_versions
        self.wait_s = wait_s
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.address = ""
        self.bytes_sent = 0
        """Bucket payload bytes this server has sent (its egress on the weight plane)."""
        self._versions: dict[int, _Version] = {}
        self._sock: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task | None = None
        self._requests: set[asyncio.Task] = set()

    async def start(self) -> str:
        if self._sock is None:
            sock = self.ctx.socket(zmq.ROUTER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.net.secure_server(sock, self.ctx, self.bind)
            sock.bind(self.bind)
            self.address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self._sock = sock
            self._task = asyncio.get_running_loop().create_task(self._serve(), name="weight-bucket-server")
        return self.address

    async def close(self) -> None:
        for t in [self._task, *self._requests]:
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in [self._task, *self._requests] if t is not None), return_exceptions=True)
        self._task = None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    # ------------------------------------------------------------------ what this process holds
    def begin(self, version: int, manifest: dict) -> None:
        """Announce ``version`` (its manifest); its buckets become servable one by one with ``put``."""
        v = self._versions.setdefault(version, _Version())
        v.manifest, v.error, v.complete = manifest, "", False
        v.buckets.clear()
        v.wake()

    def put(self, version: int, index: int, payload: Any, crc: int) -> None:
        v = self._versions[version]
        v.buckets[index] = (payload, crc)
        v.wake()

    def complete(self, version: int) -> None:
        """Every bucket of ``version`` is here: it is the newest complete version; older ones beyond
        ``keep_versions`` (and announcements of older versions that never completed) are dropped."""
        v = self._versions[version]
        n = len(v.manifest["buckets"]) if v.manifest else 0
        missing = [i for i in range(n) if i not in v.buckets]
        if missing:
            raise ValueError(f"version {version} cannot complete: buckets {missing[:5]} of {n} are missing")
        v.complete = True
        v.wake()
        done = sorted(k for k, x in self._versions.items() if x.complete)
        for old in done[:-self.keep_versions]:
            self._drop(old, "dropped for a newer version")
        for stale in [k for k, x in self._versions.items() if k < version and not x.complete]:
            self._drop(stale, "abandoned for a newer version")

    def fail(self, version: int, error: str) -> None:
        """``version`` will not arrive here: waiting requests get ``error`` at once."""
        v = self._versions.get(version)
        if v is not None and not v.complete:
            v.error = error or "failed"
            v.wake()

    def set_ipc(self, version: int, descriptors: list) -> None:
        """The CUDA IPC handles of ``version``'s device buckets (set before ``complete``)."""
        v = self._versions.setdefault(version, _Version())
        v.ipc = descriptors
        v.wake()

    def forget(self, first: int) -> list[int]:
        """Withdraw every version >= ``first``, complete or not (the trainer went back to a checkpoint and will
        publish those numbers again with other weights); waiting requests get an error. Returns them."""
        gone = sorted(k for k in self._versions if k >= first)
        for k in gone:
            self._drop(k, "withdrawn: the trainer went back to an older checkpoint")
        return gone

    def _drop(self, version: int, why: str) -> None:
        v = self._versions.pop(version, None)
        if v is not None:
            v.error = f"weight version {version} was {why}"
            v.wake()

    def latest(self) -> int:
        done = [k for k, v in self._versions.items() if v.complete]
        return max(done) if done else -1

    def held(self, version: int) -> bool:
        v = self._versions.get(version)
        return v is not None and v.complete

    def versions(self) -> list[int]:
        return sorted(k for k, v in self._versions.items() if v.complete)

    def manifest(self, version: int) -> dict:
        v = self._versions.get(version)
        if v is None or v.manifest is None:
            raise KeyError(f"weight version {version} is not held here (held: {self.versions()})")
        return v.manifest

    def bucket(self, version: int, index: int) -> tuple[Any, int]:
        """(payload, crc) of one bucket held here."""
        v = self._versions.get(version)
        if v is None or index not in v.buckets:
            raise KeyError(f"bucket {index} of weight version {version} is not held here")
        return v.buckets[index]

    def serve_bucket(self, version: int, index: int, payload: Any, crc: int) -> tuple[Any, int] | None:
        """The (payload, crc) to send for one bucket request; None sends nothing. The one point a test
        subclass may override to lose or corrupt a bucket in transit."""
        return payload, crc

    # ------------------------------------------------------------------ serving
    async def _serve(self) -> None:
        sock = self._sock
        while True:
            frames = await sock.recv_multipart()
            request = Request.parse(frames)
            if request is None:
                log.warning("weight plane: ignoring a malformed request (%d frames)", len(frames))
                continue
            task = asyncio.get_running_loop().create_task(self._answer(request))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _answer(self, request: Request) -> None:
        kind, req_id, args, peer = request.kind, request.req_id, request.args, request.peer
        try:
            if kind == Kind.LATEST:
                return await self._reply(peer, Reply(kind, req_id, {"version": self.latest()}))
            version = int(args[0])
            if kind == Kind.IPC:  # the descriptors come after the manifest, once the device copies are made
                v = await self._wait(version, lambda v: v.ipc is not None or v.complete)
                if v.ipc is None:
                    raise KeyError(f"weight version {version} was published here without CUDA IPC buckets")
                return await self._reply(peer, Reply(kind, req_id, v.ipc))
            v = await self._wait(version, lambda v: v.manifest is not None)
            if kind == Kind.MANIFEST:
                return await self._reply(peer, Reply(kind, req_id, v.manifest))
            if kind == Kind.BUCKET:
                index = int(args[1])
                n = len(v.manifest["buckets"])
                if not 0 <= index < n:
                    raise IndexError(f"weight version {version} has {n} buckets; no bucket {index}")
                v = await self._wait(version, lambda v: index in v.buckets)
                payload, crc = v.buckets[index]
                served = self.serve_bucket(version, index, payload, crc)
                if served is None:
                    return
                payload, crc = served
                nbytes = memoryview(payload).nbytes
                header = {"version": version, "index": index, "nbytes": nbytes, "crc": crc}
                await self._reply(peer, Reply(kind, req_id, header, payload))
                self.bytes_sent += nbytes
                return
            raise ValueError(f"unknown request kind {kind!r}")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - every bad or unanswerable request gets an error reply
            await self._reply(peer, Reply(Kind.ERROR, req_id, f"{type(e).__name__}: {e}"))

    async def _wait(self, version: int, ready) -> _Version:
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while True:
            v = self._versions.get(version)
            if v is None:
                older = [k for k, x in self._versions.items() if x.complete and k > version]
                if older:
                    raise KeyError(f"weight version {version} is not held here (held: {self.versions()})")
                v = self._versions[version] = _Version()  # a placeholder until begin()
            if v.error:
                raise KeyError(v.error)
            if ready(v):
                return v
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError(f"weight version {version} did not arrive here within {self.wait_s:.0f} s")
            try:
                await asyncio.wait_for(v.changed.wait(), left)
            except TimeoutError:
                pass

    async def _reply(self, peer: bytes, reply: Reply) -> None:
        try:
            await self._sock.send_multipart(reply_frames(peer, reply), copy=reply.data is None)
        except zmq.ZMQError as e:  # the peer went away: nothing to answer
            log.debug("weight plane: reply to a vanished peer dropped: %s", e)
