"""The trajectory side of env hosting: open an env on some host, then reset/step/close it.

:class:`EnvPool` spreads envs over hosts — in-process :class:`EnvHost` objects (cheap envs, tests) or
actor handles of ``EnvHost`` actors in their own processes. Whatever goes wrong with an env (it
raised, hung past its timeout, its host process died) reaches the trajectory as one exception,
:class:`EnvFailure`, whose message says what happened.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any

from rollart.actors import ActorDeadError, ActorRef, LocalHandle, RestartPolicy
from rollart.distributed import Cluster, ResourceManager
from rollart.messages import CloseEnv, CreateEnv, PrewarmEnvs, ResetEnv, StepEnv
from rollart.rollout.env_host import EnvHost


class EnvFailure(RuntimeError):
    """An env raised, hung, or its host died; the trajectory using it is marked failed."""


class EnvSession:
    """One env on one host, used by exactly one trajectory coroutine at a time."""

    def __init__(self, host: ActorRef, key: str, system_prompt: str, max_new_tokens: int,
                 host_name: str, grace_s: float):
        self.host = host
        self.key = key
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.host_name = host_name
        self.grace_s = grace_s
        self.closed = False
        self.inprocess = False
        self.pool_index: int | None = None
        """Its host's index in the pool that opened it; None once released (or not from a pool)."""

    async def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        r = await self._checked(ResetEnv(self.key, seed, options))
        return r["observation"], r["info"]

    async def step(self, action: str, cores: tuple[int, ...] = ()) -> tuple[str, float, bool, bool, dict]:
        """``cores``: granted by the action scheduler (the host pins what the step starts to them)."""
        r = await self._checked(StepEnv(self.key, action, list(cores) if cores else None))
        return r["observation"], r["reward"], r["terminated"], r["truncated"], r["info"]

    async def close(self) -> None:
        """Release the env on its host (idempotent; a dead host counts as released)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.inprocess:  # an in-process close never waits on anything
                await self.host.send(CloseEnv(self.key))
            else:
                async with asyncio.timeout(self.grace_s):
                    await self.host.send(CloseEnv(self.key))
        except Exception:  # noqa: BLE001 - the host is gone or stuck: nothing left to release
            pass

    async def _checked(self, message: ResetEnv | StepEnv) -> dict:
        method = "reset" if isinstance(message, ResetEnv) else "step"
        if self.closed:
            raise EnvFailure(f"{method} on a released env ({self.key})")
        try:
            if self.inprocess:  # the host's own timeout bounds the call; no transport can stall
                result = await self.host.send(message)
            else:  # the host enforces the env's timeout; the grace bounds a host that stopped answering
                async with asyncio.timeout(self.grace_s):
                    result = await self.host.send(message)
        except TimeoutError:
            raise EnvFailure(f"env host {self.host_name} did not answer {method} of env {self.key} within "
                             f"{self.grace_s:g} s (env_host_timeout_s)") from None
        except asyncio.CancelledError:
            raise
        except Exception as e:  # ActorDeadError and transport errors: the host is gone
            raise EnvFailure(f"env host {self.host_name} failed during {method}: "
                             f"{type(e).__name__}: {e}") from None
        if not result.get("ok"):
            self.closed = True  # the host already dropped it
            raise EnvFailure(str(result.get("error", "unknown env error")))
        return result


class EnvPool:
    """Opens envs on a set of hosts, least-loaded first (by envs this pool opened on each)."""

    def __init__(self, hosts: list[ActorRef | EnvHost], grace_s: float = 120.0):
        """``hosts``: actor handles of EnvHost actors, or EnvHost objects (served in this process). ``grace_s``
        (a run's ``env_host_timeout_s``) bounds every call to a host process: one that accepts a call and never
        answers fails that env's trajectory after this long, even while its process still answers heartbeats."""
        if not hosts:
            raise ValueError("EnvPool needs at least one env host")
        self.host_objects = list(hosts)
        self.hosts = [(f"host{i}", LocalHandle(h, f"host{i}")) if isinstance(h, EnvHost) else (h.name, h)
                      for i, h in enumerate(hosts)]
        self.grace_s = grace_s
        self.open_count = [0] * len(hosts)
        self._rr = itertools.count()
        self.counters = {"opened": 0, "released": 0, "open_failures": 0, "open_retries": 0}

    @classmethod
    def inprocess(cls, config: Any = None, imports: tuple = ()) -> "EnvPool":
        """One in-process host (thread-pooled env calls): for cheap envs and tests."""
        return cls([EnvHost(config, imports)])

    @classmethod
    async def spawn(cls, system: Any, num_hosts: int, config: dict | None = None, imports: tuple = (),
                    grace_s: float = 120.0, name: str = "envhost", restarts: int = 0) -> "EnvPool":
        """``num_hosts`` EnvHost actors, each in its own process (``system`` is a running ActorSystem),
        started as a Cluster on one CPU device each (workers ``{name}-0``, ``{name}-1``, ...). A host that
        dies fails the envs it held; it is restarted in place up to ``restarts`` times (meanwhile, and after,
        new envs go to the others). ``imports`` are modules each host imports first — where your own envs
        are registered."""
        if num_hosts < 1:
            raise ValueError(f"num_hosts must be >= 1, got {num_hosts}")
        hosts = Cluster(EnvHost, ResourceManager({"cpu": num_hosts}), num_hosts, name=name, system=system,
                        mode="process", restart=RestartPolicy(max_restarts=restarts),
                        worker_args=(dict(config or {}), list(imports)), verbose=False)
        await hosts.start()
        return cls.from_cluster(hosts, grace_s)

    @classmethod
    def from_cluster(cls, hosts: Cluster, grace_s: float = 120.0) -> "EnvPool":
        """A pool over a started Cluster of EnvHost actors."""
        return cls([m.handle for m in hosts.members], grace_s=grace_s)

    async def prewarm(self, env_id: str, kwargs: dict | None = None, faults: dict | None = None,
                      count: int = 1) -> int:
        """Create ``count`` envs ahead of a step, spread over the hosts (each needs reuse_envs)."""
        shares = [count // len(self.hosts) + (i < count % len(self.hosts)) for i in range(len(self.hosts))]
        done = await asyncio.gather(*(host.send(PrewarmEnvs(env_id, kwargs or {}, faults, n))
                                      for (_, host), n in zip(self.hosts, shares) if n))
        return sum(done)

    @property
    def live(self) -> int:
        return sum(self.open_count)

    async def open(self, env_id: str, kwargs: dict | None = None, faults: dict | None = None) -> EnvSession:
        """An env on the least-loaded host that creates it. While a host process that died is being restarted
        (up to ``grace_s``), the open waits for it instead of failing a trajectory that only starts now."""
        waited, delay = 0.0, 0.05
        while True:
            session, errors, restarting = await self._open_once(env_id, kwargs, faults)
            if session is not None:
                return session
            if not restarting or waited >= self.grace_s:
                break
            self.counters["open_retries"] += 1
            # a send to a process not yet known dead fails at once; once the runtime restarts it, a send waits
            await asyncio.sleep(delay)
            waited, delay = waited + delay, min(2 * delay, 1.0)
        self.counters["open_failures"] += 1
        raise EnvFailure(f"cannot create {env_id!r}: " + "; ".join(errors))

    async def _open_once(self, env_id: str, kwargs: dict | None, faults: dict | None
                         ) -> tuple[EnvSession | None, list[str], bool]:
        """(a session, or None with each host's error and whether one of them is a dead host being restarted)."""
        start = next(self._rr)
        order = sorted(range(len(self.hosts)), key=lambda i: (self.open_count[i], (i - start) % len(self.hosts)))
        errors = []
        restarting = False
        for i in order:  # a host that is down or full: try the next one
            name, host = self.hosts[i]
            inprocess = isinstance(self.host_objects[i], EnvHost)
            create = CreateEnv(env_id, kwargs or {}, faults)
            try:
                if inprocess:  # the host's create_timeout_s bounds it; no transport can stall
                    r = await host.send(create)
                else:
                    async with asyncio.timeout(self.grace_s):
                        r = await host.send(create)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: {type(e).__name__}: {e}")
                restarting |= isinstance(e, ActorDeadError) and host.supervised and host.alive
                continue
            if r.get("ok"):
                self.open_count[i] += 1
                self.counters["opened"] += 1
                session = EnvSession(host, r["key"], r["system_prompt"], r["max_new_tokens"], name,
                                     self.grace_s)
                session.pool_index = i
                session.inprocess = inprocess
                return session, errors, False
            errors.append(f"{name}: {r.get('error')}")
        return None, errors, restarting

    async def release(self, session: EnvSession) -> None:
        """Close the session's env and free its slot (idempotent)."""
        index = session.pool_index
        if index is None:
            return
        session.pool_index = None
        self.open_count[index] -= 1
        self.counters["released"] += 1
        await session.close()
