"""Calls over real sockets, in-process and in separate processes: results, errors, timeouts, cancel, streams, tensors."""
import asyncio
import os

import numpy as np
import pytest
import pytest_asyncio
import torch

from rollart.actors import ActorSystem, ActorTimeoutError, RemoteError
from rollart.types import SamplingParams
from rollart.types import GenerationResult, Trajectory

import sample_actors
from sample_actors import Echo, Point

MODES = ["inprocess", "process"]

# one system and one actor per mode for the whole module: spawning a process per test is the slow part
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=MODES)
async def echo(request, system):
    return await system.spawn(Echo, "t", scale=3, name=f"echo-{request.param}", mode=request.param)


async def test_call_returns_value_and_ctor_args_arrive(echo):
    assert await echo.call("add", 2, b=5) == 21
    assert await echo.add(1, 1) == 6
    info = await echo.info()
    assert info["tag"] == "t" and info["scale"] == 3 and info["started"] is True
    if echo.name.endswith("process") and not echo.name.endswith("inprocess"):
        assert info["pid"] != os.getpid() and info["pid"] == echo.pid


async def test_actor_processes_use_one_torch_thread(echo):
    if echo.name == "echo-process":
        assert await echo.torch_threads() == 1  # ActorSystem(torch_threads=1) is the default


async def test_payload_types_round_trip(echo):
    value = {"none": None, "b": True, "i": -(2**40), "f": 1.5, "s": "héllo", "bytes": b"\x00\xff",
             "list": [1, [2, 3]], "tuple": (1, (2, "x")), 7: "int key",
             "sp": SamplingParams(temperature=0.0, max_tokens=5, stop=["\n"]),
             "traj": Trajectory("t0", "g0", "FrozenLake", token_ids=[1, 2], loss_mask=[0, 1], reward=1.0),
             "gen": GenerationResult([5], [-0.1], [2], "stop", worker="w"),
             "point": Point(1, 2.5)}
    out = await echo.echo(value)
    assert out == value
    assert isinstance(out["tuple"], tuple) and isinstance(out["tuple"][1], tuple)
    assert isinstance(out["sp"], SamplingParams) and isinstance(out["traj"], Trajectory)


async def test_torch_tensors_round_trip_bit_exactly(echo):
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool):
        src = (torch.randn(257, 33) * 100).to(dtype)  # (257, 33): above the inline limit -> zero-copy frame
        out = await echo.echo({"t": src, "small": src[:2, :3], "scalar": src[0, 0], "empty": src[:0]})
        for key, ref in (("t", src), ("small", src[:2, :3]), ("scalar", src[0, 0]), ("empty", src[:0])):
            t = out[key]
            assert t.dtype == ref.dtype and t.shape == ref.shape, (dtype, key)
            assert t.numpy().tobytes() == ref.numpy().tobytes() if dtype != torch.bfloat16 else \
                torch.equal(t.view(torch.int16), ref.contiguous().view(torch.int16)), (dtype, key)
    out["t"][0, 0] = True  # received tensors are writable


async def test_numpy_array_round_trips_bit_exactly(echo):
    arrays = [np.random.rand(100, 50), np.arange(10, dtype=np.int16), np.array(3.5, dtype=np.float32),
              np.random.rand(30, 40).astype(np.float32)[:, ::2]]  # last one non-contiguous
    out = await echo.echo(arrays)
    for a, b in zip(arrays, out):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert out[0].flags.writeable
    made = await echo.make_array(1000)
    assert made.dtype == np.float32 and np.array_equal(made, np.arange(1000, dtype=np.float32))


async def test_large_tensor_transfer(echo):
    t = torch.randint(0, 255, (16 * 1024 * 1024,), dtype=torch.uint8)  # 16 MB
    stats = await echo.tensor_stats(t)
    assert stats == {"dtype": "torch.uint8", "shape": [16 * 1024 * 1024], "nbytes": 16 * 1024 * 1024}
    back = await echo.echo(t)
    assert torch.equal(back, t)


async def test_remote_exception_carries_type_and_traceback(echo):
    with pytest.raises(RemoteError) as info:
        await echo.fail("xyz")
    err = info.value
    assert err.remote_type == "builtins.ValueError" and err.matches(ValueError)
    assert "boom: xyz" in err.message
    assert "sample_actors.py" in err.traceback and "in fail" in err.traceback
    assert await echo.add(1, 2) == 9  # still serving


async def test_timeout_raises_and_cancels_the_remote_call(echo):
    with pytest.raises(ActorTimeoutError):
        await echo.call("sleep", 30, label="slow", timeout=0.3)
    for _ in range(100):  # the cancel is delivered asynchronously; poll the actor's state
        if "slow" in await echo.get_cancelled():
            break
        await asyncio.sleep(0.05)
    assert "slow" in await echo.get_cancelled()


async def test_cancelling_the_caller_cancels_inside_the_actor(echo):
    task = asyncio.ensure_future(echo.sleep(30, "c1"))
    other = asyncio.ensure_future(echo.sleep(0.05, "fast"))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await other == "fast"
    for _ in range(100):
        if "c1" in await echo.get_cancelled():
            break
        await asyncio.sleep(0.05)
    assert "c1" in await echo.get_cancelled() and "fast" not in await echo.get_cancelled()


async def test_async_calls_run_concurrently_in_the_actor(echo):
    results = await asyncio.gather(*(echo.sleep(0.3, str(i)) for i in range(20)))
    assert results == [str(i) for i in range(20)]


async def test_streams(echo):
    assert [x async for x in echo.stream("count", 200)] == list(range(200))  # > flow-control window
    assert [x async for x in echo.stream("squares", 5)] == [0, 1, 4, 9, 16]
    got = []
    with pytest.raises(RemoteError) as info:
        async for x in echo.stream("count_then_fail", 3):
            got.append(x)
    assert got == [0, 1, 2] and info.value.matches(RuntimeError)


async def test_breaking_out_of_a_stream_cancels_it(echo):
    agen = echo.stream("count", 10_000, delay=0.01)
    async for x in agen:
        if x == 3:
            break
    await agen.aclose()
    assert await echo.add(0, 1) == 3


async def test_stream_item_timeout(echo):
    with pytest.raises(ActorTimeoutError):
        async for _ in echo.stream("count", 3, delay=5.0, timeout=0.2):
            pass


async def test_background_loop_started_in_on_start_serves_concurrent_calls(system):
    for mode in MODES:
        eng = await system.spawn(sample_actors.Engine, name=f"engine-{mode}", mode=mode)
        outs = await asyncio.gather(*(eng.generate(f"p{i}") for i in range(10)))
        assert outs == [f"p{i}"[::-1] for i in range(10)]
        assert await eng.num_steps() == 10


async def test_blocking_method_runs_in_a_thread(echo):
    busy = asyncio.ensure_future(echo.busy(0.5))
    await asyncio.sleep(0.1)
    assert await echo.add(1, 1) == 6  # answered while busy() holds a worker thread
    assert not busy.done()
    assert await busy == 0.5


async def test_bad_calls_get_clear_errors_and_actor_keeps_serving(echo):
    with pytest.raises(RemoteError, match="has no public method 'ad'.*did you mean 'add'"):
        await echo.call("ad", 1, 2)
    with pytest.raises(RemoteError, match=r"bad arguments for echo-.*add\(a: .*too many positional"):
        await echo.add(1, 2, 3)
    with pytest.raises(RemoteError, match=r"bad arguments"):
        await echo.sleep()
    with pytest.raises(RemoteError, match="unsupported operand|can only concatenate|must be"):
        await echo.add("x", 2)  # wrong argument type: the method's own TypeError, with traceback
    with pytest.raises(RemoteError, match="is a generator method: use handle.stream"):
        await echo.count(3)
    with pytest.raises(RemoteError, match="not a generator method: use handle.call"):
        async for _ in echo.stream("add", 1, 2):
            pass
    with pytest.raises(RemoteError, match="could not send its reply.*cannot send a builtins.object"):
        await echo.bad_return()
    with pytest.raises(RemoteError, match="_private|no public method"):
        await echo.call("_engine_loop")
    with pytest.raises(RemoteError, match="no public method 'on_start'"):
        await echo.call("on_start")
    assert await echo.add(2, 2) == 12


async def test_unsendable_arguments_fail_at_the_caller(echo):
    from rollart.actors import WireError
    with pytest.raises(WireError, match="cannot send a builtins.object"):
        await echo.echo(object())
    with pytest.raises(WireError, match="not allowed on the wire"):
        await echo.echo(sample_actors.Unregistered(1))
    assert await echo.add(0, 0) == 0


async def test_constructor_failure_raises_remote_error(system):
    for mode in MODES:
        with pytest.raises(RemoteError, match="cannot start: nope") as info:
            await system.spawn(sample_actors.Broken, "nope", name=f"broken-{mode}", mode=mode)
        assert "__init__" in info.value.traceback
        assert system.handle(f"broken-{mode}").state == "dead"


async def test_spawn_argument_errors(system):
    with pytest.raises(ValueError, match="package.module:ClassName"):
        await system.spawn("NoColon")
    with pytest.raises(ValueError, match="mode must be"):
        await system.spawn(Echo, mode="thread")
    dup = await system.spawn(Echo, name="dup", mode="inprocess")
    with pytest.raises(ValueError, match="already ready"):
        await system.spawn(Echo, name="dup", mode="inprocess")
    await dup.stop()
    with pytest.raises(RemoteError, match="has no 'Nope'"):
        await system.spawn("sample_actors:Nope", name="nope", mode="inprocess")


async def test_setup_calls(system):
    ok = await system.spawn(sample_actors.Engine, name="setup-ok", mode="inprocess",
                            setup_calls=[("generate", ("xy",), {})])
    assert ok.state == "ready" and await ok.num_steps() == 1  # the setup call ran before ours
    with pytest.raises(RemoteError, match="boom: at setup"):
        await system.spawn(Echo, name="setup-bad", mode="inprocess", setup_calls=[("fail", ("at setup",), {})])
    assert system.handle("setup-bad").state == "dead"
    await ok.stop()
