"""The actor runtime: plain logic classes served over ZeroMQ, each in its own process (or in-process for
tests), reached through handles — calls, typed request messages, streams — and supervised by heartbeats.

    from rollart.actors import ActorSystem, RestartPolicy

    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=3.0) as system:
        w = await system.spawn("mypkg.workers:Worker", seed=0, name="w0",
                               restart=RestartPolicy(max_restarts=3))
        obs = await w.reset(timeout=10)              # == await w.call("reset", timeout=10)
        out = await w.send(Generate(prompt))         # runs the method marked @handles(Generate)
        async for tok in w.stream("tokens", prompt):  # async generator methods stream
            ...

Wire: ``messages`` (every wire type, versioned), ``codec`` (payload values: msgpack + zero-copy
numpy/torch frames + allowed dataclasses), ``zsock`` (asyncio integration of a zmq socket), ``curve``
(authentication for non-loopback endpoints). Actor side: ``server`` serves one object, ``dispatch``
reads what its class exposes, ``serve``/``launch`` run it in a process, ``heartbeat`` pings.
Coordinator side: ``system`` (``ActorSystem``) wires ``table``, ``router``, ``calls``, ``handshake``,
``inbox``, ``incarnations``, ``record``, ``supervision``, ``restart`` (RestartPolicy) and ``liveness``.
``handle.ActorRef`` is what a run asks of any actor it talks to; ``local.LocalHandle`` puts an in-process object
behind it; ``errors`` holds what callers catch (ActorDeadError, RemoteError, ...).
"""
from rollart.actors.codec import allow_dataclass_modules, allowed_dataclass_modules, wire_dataclass
from rollart.actors.dispatch import blocking, handles
from rollart.actors.errors import ActorDeadError, ActorError, ActorTimeoutError, RemoteError, WireError
from rollart.actors.handle import ActorHandle, ActorRef, answering
from rollart.actors.local import LocalHandle
from rollart.actors.restart import RestartPolicy
from rollart.actors.system import ActorSystem

__all__ = ["ActorSystem", "ActorHandle", "ActorRef", "answering", "LocalHandle", "RestartPolicy", "ActorDeadError", "ActorError",
           "RemoteError", "ActorTimeoutError", "WireError", "blocking", "handles", "wire_dataclass",
           "allow_dataclass_modules", "allowed_dataclass_modules"]
