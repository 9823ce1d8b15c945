"""Fuzz: >= 10,000 random and malformed frames at a live actor process and at the coordinator; both keep serving."""
import asyncio
import os
import random
import subprocess
import sys

import msgpack
import zmq
import zmq.asyncio

from rollart.actors import ActorSystem
from rollart.actors import messages as m

from sample_actors import Echo

N_FRAMES = 10_000
HERE = os.path.dirname(__file__)


def random_message(rng: random.Random) -> list[bytes]:
    """One multipart message: random junk, or a well-formed message with one part broken."""
    def junk(n=64):
        return rng.randbytes(rng.randint(0, n))

    call = bytes((m.Kind.CALL, m.VERSION))
    kind = rng.randrange(12)
    if kind == 0:
        return [junk() for _ in range(rng.randint(1, 5))]
    if kind == 1:  # unknown kind / bad version
        return [bytes((rng.randint(16, 255), m.VERSION)), junk(), junk()]
    if kind == 2:
        return [bytes((m.Kind.CALL, rng.randint(2, 255))), junk()]
    if kind == 3:  # right header, junk body
        return [bytes((rng.choice(list(m.Kind)), m.VERSION)), junk()]
    if kind == 4:  # right body length, wrong types
        return [call, msgpack.packb([rng.random(), 5, "x", b""])]
    if kind == 5:  # valid call meta, junk payload
        return [call, msgpack.packb([rng.randint(1, 10**9), "add", False, junk(200)])]
    if kind == 6:  # valid call, unknown method or private one
        return m.encode(m.Call(rng.randint(1, 10**9), rng.choice(["nope", "_x", "on_start", "__init__"]),
                               False, [1], {}))
    if kind == 7:  # valid call, wrong argument types / counts
        args = [rng.choice([None, "s", 1.5, [1], {"a": 1}, b"b"]) for _ in range(rng.randint(0, 4))]
        return m.encode(m.Call(rng.randint(1, 10**9), "add", False, args, {}))
    if kind == 8:  # cancels and credits for calls that do not exist
        return m.encode(rng.choice([m.Cancel(rng.randint(0, 10**9)), m.Credit(rng.randint(0, 10**9), 5)]))
    if kind == 9:  # forged array ext: out-of-range buffer / bad dtype
        ext = msgpack.ExtType(rng.choice([1, 2, 3, 4, 77]), msgpack.packb(["<f8", [rng.randint(0, 9)], 3]))
        return [call, msgpack.packb([rng.randint(1, 10**9), "echo", False, msgpack.packb([[ext], {}])])]
    if kind == 10:  # messages an actor should never receive
        return m.encode(rng.choice([m.Result(1, 2), m.Ready(True, []), m.Ping(3), m.Hello("x", "a:b", 1, "h")]))
    return [call, msgpack.packb([1, "add", False, msgpack.packb([[1, 2], {}])]), junk()]  # stray buffer frame


async def test_actor_survives_10000_malformed_frames(tmp_path):
    rng = random.Random(1234)
    ctx = zmq.asyncio.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, *sys.path]))
    proc = subprocess.Popen([sys.executable, "-m", "rollart.actors.serve", "--connect", f"tcp://127.0.0.1:{port}",
                             "--cls", "sample_actors:Echo", "--name", "fuzzed", "--identity", "fuzzed#1",
                             "--coordinator-timeout", "120", "--parent-pid", str(os.getpid())], env=env)
    try:
        async def recv_kind(kind, timeout=30):
            while True:
                frames = await asyncio.wait_for(router.recv_multipart(), timeout)
                if frames[0] != b"fuzzed#1":
                    continue  # heartbeat socket
                msg = m.decode(frames[1:])
                if isinstance(msg, kind):
                    return msg

        hello = await recv_kind(m.Hello, 60)
        assert hello.name == "fuzzed"
        await router.send_multipart([b"fuzzed#1", *m.encode(m.Init("sample_actors:Echo", ["z"], {}))])
        assert (await recv_kind(m.Ready, 60)).ok

        replies = {"Reject": 0, "Error": 0, "Result": 0}
        sent, marker = 0, 10**12
        while sent < N_FRAMES:
            for _ in range(500):
                await router.send_multipart([b"fuzzed#1", *random_message(rng)])
                sent += 1
            # a valid call after each batch: its answer comes after the replies to the whole batch
            marker += 1
            await router.send_multipart([b"fuzzed#1", *m.encode(m.Call(marker, "add", False, [20, 22], {}))])
            while True:
                frames = await asyncio.wait_for(router.recv_multipart(), 30)
                if frames[0] != b"fuzzed#1":
                    continue  # heartbeat socket
                msg = m.decode(frames[1:])
                if isinstance(msg, m.Result) and msg.call_id == marker:
                    assert msg.value == 42
                    break
                replies[type(msg).__name__] += 1
        assert sent >= N_FRAMES
        assert replies["Reject"] > 1000 and replies["Error"] > 1000, replies
        assert proc.poll() is None  # still running and answering

        await router.send_multipart([b"fuzzed#1", *m.encode(m.Stop("done"))])
        assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        router.close(linger=0)
        ctx.term()


async def test_coordinator_survives_10000_malformed_frames():
    rng = random.Random(99)
    async with ActorSystem() as system:
        h = await system.spawn(Echo, name="bystander", mode="inprocess")
        pending = asyncio.ensure_future(h.sleep(1.0, "ok"))
        ctx = zmq.asyncio.Context()
        rogue = ctx.socket(zmq.DEALER)
        rogue.setsockopt(zmq.LINGER, 0)
        rogue.connect(system.endpoint)
        try:
            for i in range(N_FRAMES):
                msg = random_message(rng)
                if i % 1000 == 0:  # forged replies to real pending call ids (counted from 1) are ignored
                    msg = m.encode(m.Result(rng.randint(1, 8), "forged"))
                await rogue.send_multipart(msg)
                if i % 500 == 0:
                    await asyncio.sleep(0)  # let the coordinator drain
            for _ in range(400):
                if system.rejected > 5000:
                    break
                await asyncio.sleep(0.05)
            assert system.rejected > 5000
            assert await pending == "ok"
            assert await h.add(40, 2) == 42
        finally:
            rogue.close(linger=0)
            ctx.term()
