"""Typed request messages: ``handle.send(msg)`` runs the method marked ``@handles(type(msg))``, in-process and in a process."""
import asyncio
from dataclasses import dataclass

import pytest
import pytest_asyncio

from rollart.actors import ActorSystem, ActorTimeoutError, RemoteError, WireError, handles, wire_dataclass
from rollart.actors.dispatch import message_table

from sample_actors import Explode, Nap, Point, Scale, Typed, Unregistered

on_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["inprocess", "process"])
async def typed(request, system):
    return await system.spawn(Typed, factor=3, name=f"typed-{request.param}", mode=request.param)


@on_module_loop
async def test_a_message_runs_the_method_that_handles_its_class(typed):
    assert await typed.send(Scale(7)) == 21
    assert await typed.send(Nap(0.0, "awake"), timeout=10) == "awake"
    assert await asyncio.gather(*(typed.send(Scale(i)) for i in range(5))) == [0, 3, 6, 9, 12]


@on_module_loop
async def test_an_unhandled_message_is_a_per_call_error_and_the_actor_keeps_serving(typed):
    with pytest.raises(RemoteError) as info:
        await typed.send(Point(1, 2.0))
    assert info.value.matches(TypeError)
    assert "handles no sample_actors.Point messages" in info.value.message
    assert "sample_actors.Scale" in info.value.message  # says what it does handle
    assert typed.alive and await typed.send(Scale(1)) == 3


@on_module_loop
async def test_a_raising_handler_is_a_remote_error(typed):
    with pytest.raises(RemoteError, match="boom: no") as info:
        await typed.send(Explode("no"))
    assert info.value.matches(ValueError)
    assert await typed.send(Scale(2)) == 6


@on_module_loop
async def test_what_cannot_be_a_message_fails_at_the_caller(typed):
    with pytest.raises(TypeError, match="request message"):
        await typed.send({"value": 1})
    with pytest.raises(TypeError, match="request message"):
        await typed.send(Scale)  # the class, not an instance
    with pytest.raises(WireError, match="not allowed on the wire"):
        await typed.send(Unregistered(1))
    assert await typed.send(Scale(3)) == 9


@on_module_loop
async def test_timeout_cancels_the_handler(typed):
    with pytest.raises(ActorTimeoutError):
        await typed.send(Nap(30.0, "late"), timeout=0.2)
    for _ in range(100):
        if "late" in await typed.get_cancelled():
            break
        await asyncio.sleep(0.02)
    assert "late" in await typed.get_cancelled()


@wire_dataclass
@dataclass
class _Msg:
    x: int = 0


def test_handles_refuses_what_it_cannot_serve():
    with pytest.raises(TypeError, match="dataclass types"):
        handles(int)
    with pytest.raises(TypeError, match="wire_dataclass"):
        handles(Unregistered)
    with pytest.raises(TypeError, match="generator method"):
        class Streamer:
            @handles(_Msg)
            async def gen(self, msg):
                yield msg


def test_message_table_refuses_two_handlers_and_hidden_ones():
    class Twice:
        @handles(_Msg)
        def a(self, msg): ...

        @handles(_Msg)
        def b(self, msg): ...

    class Hidden:
        @handles(_Msg)
        def _private(self, msg): ...

    with pytest.raises(TypeError, match="handles _Msg twice"):
        message_table(Twice)
    with pytest.raises(TypeError, match="not a public method"):
        message_table(Hidden)
    assert message_table(Typed) == {Scale: "scale", Nap: "nap", Explode: "explode"}
