"""rollart's actor runtime: plain logic classes served over ZeroMQ, in-process or in their own process.

    from rollart.actors import ActorSystem, RestartPolicy

    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=3.0) as system:
        w = await system.spawn("envs.frozenlake:EnvWorker", seed=0, name="env0",
                               restart=RestartPolicy(max_restarts=3))
        obs = await w.reset(timeout=10)              # == await w.call("reset", timeout=10)
        async for tok in w.stream("generate", prompt):  # async generator methods stream
            ...

Pieces: ``messages`` (every wire type, versioned), ``codec`` (payload values: msgpack + zero-copy
numpy/torch frames + allowed dataclasses), ``zsock`` (lean asyncio integration of a zmq socket),
``server`` (actor side), ``system`` (coordinator side, with ``inbox``, ``supervision``, ``calls`` and
``record``), ``heartbeat``, ``launch``/``serve`` (processes),
``curve`` (authentication for non-loopback endpoints). See ``server`` for how methods are dispatched.
"""
from rollart.actors.codec import allow_dataclass_modules, wire_dataclass
from rollart.actors.errors import ActorDeadError, ActorError, ActorTimeoutError, RemoteError, WireError
from rollart.actors.handle import ActorHandle
from rollart.actors.restart import RestartPolicy
from rollart.actors.server import blocking
from rollart.actors.system import ActorSystem

__all__ = ["ActorSystem", "ActorHandle", "RestartPolicy", "ActorDeadError", "ActorError", "RemoteError",
           "ActorTimeoutError", "WireError", "blocking", "wire_dataclass", "allow_dataclass_modules"]
