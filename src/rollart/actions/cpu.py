"""CPU manager via allocate-on-execution (ARL-Tangram §5.2).

A trajectory is placed on one node at its first action (the node with the most free memory among
those with room for its memory and the action's cores) and keeps its memory and its workspace
directory there until :meth:`CpuManager.end_trajectory`: state stays put between actions, cores do
not. Each action runs as a real process pinned to exactly the cores the scheduler gave it — a cgroup
v1 cpuset under ``/sys/fs/cgroup/cpuset/rollart`` when writable, else ``os.sched_setaffinity`` — and
its cores return to the pool when the process exits. Test runs are elastic: ``{dop}`` in the command
becomes the core count, so ``pytest -n {dop}`` (pytest-xdist) uses every core it was given; ``{xdist}``
is the same except that one core gives ``0`` (``pytest -n 0`` runs in-process, as the dataset's
single-process command does, instead of paying for one xdist worker process). Each node
runs its own scheduler, as in the paper.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Optional, Sequence

from rollart.actions.action import Action
from rollart.actions.basic import CountPool
from rollart.actions.runtime import ActionScheduler

CGROUP_ROOT = "/sys/fs/cgroup/cpuset"


def expand(arg: str, dop: int) -> str:
    """Fill ``{dop}`` (cores granted) and ``{xdist}`` (pytest-xdist workers: 0 = in-process on one core)."""
    return arg.replace("{dop}", str(dop)).replace("{xdist}", str(dop if dop > 1 else 0))


class CorePool(CountPool):
    """CPU cores of one node with identities: an action gets a concrete, exclusive core set."""

    def __init__(self, name: str, cores: Sequence[int], clock: Callable[[], float] = time.monotonic):
        super().__init__(name, len(cores), clock)
        self.free_cores = sorted(cores)

    def acquire(self, amount: float, action: Any = None) -> tuple[int, ...]:
        n = int(amount)
        if n > len(self.free_cores):
            raise RuntimeError(f"pool {self.name!r}: {n} cores asked, {len(self.free_cores)} free")
        # prefer a contiguous run (neighbouring cores share caches / the NUMA node)
        for i in range(len(self.free_cores) - n + 1):
            run = self.free_cores[i:i + n]
            if run[-1] - run[0] == n - 1:
                break
        else:
            run = self.free_cores[:n]
        for c in run:
            self.free_cores.remove(c)
        super().acquire(n, action)
        return tuple(run)

    def release(self, cores: tuple[int, ...]) -> None:
        self.free_cores = sorted(self.free_cores + list(cores))
        super().release(len(cores))


class Pinner:
    """Puts a child process on a core set: a fresh cgroup cpuset, or CPU affinity as fallback."""

    def __init__(self, use_cgroup: Optional[bool] = None):
        self.base = os.path.join(CGROUP_ROOT, f"rollart-{os.getpid()}")
        if use_cgroup is None:
            use_cgroup = self._try_make_base()
        elif use_cgroup and not self._try_make_base():
            raise RuntimeError(f"cannot create cgroup cpuset {self.base}: run as root with cgroup v1 "
                               "cpuset mounted, or pass use_cgroup=False for CPU affinity")
        self.use_cgroup = use_cgroup

    def _try_make_base(self) -> bool:
        try:
            os.makedirs(self.base, exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):
                with open(os.path.join(CGROUP_ROOT, f)) as src:
                    value = src.read().strip()
                with open(os.path.join(self.base, f), "w") as dst:
                    dst.write(value)
            return True
        except OSError:
            return False

    def prepare(self, name: str, cores: tuple[int, ...]) -> Callable[[], None]:
        """A preexec function that pins the child before it runs anything."""
        cpus = ",".join(str(c) for c in cores)
        if not self.use_cgroup:
            return lambda: os.sched_setaffinity(0, set(cores))
        path = os.path.join(self.base, name)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cpuset.cpus"), "w") as f:
            f.write(cpus)
        with open(os.path.join(self.base, "cpuset.mems")) as src, open(os.path.join(path, "cpuset.mems"), "w") as dst:
            dst.write(src.read().strip())
        tasks = os.path.join(path, "tasks")

        def enter() -> None:
            with open(tasks, "w") as f:
                f.write(str(os.getpid()))
        return enter

    def cleanup(self, name: str) -> None:
        if self.use_cgroup:
            try:
                os.rmdir(os.path.join(self.base, name))
            except OSError:
                pass

    def close(self) -> None:
        if self.use_cgroup:
            try:
                os.rmdir(self.base)
            except OSError:
                pass


@dataclasses.dataclass
class CommandResult:
    """What a command action returns to the trajectory."""

    returncode: int
    stdout: str
    stderr: str
    cores: tuple[int, ...]
    seconds: float


@dataclasses.dataclass
class TrajectoryState:
    node: int
    memory: float
    workspace: str


class CpuManager:
    """Nodes of pinned cores + memory; per-node :class:`ActionScheduler`; trajectory affinity."""

    def __init__(self, nodes: Sequence[Sequence[int]], memory_per_node: float, depth: int = 2,
                 elastic: bool = True, use_cgroup: Optional[bool] = None, workdir: Optional[str] = None):
        if not nodes:
            raise ValueError("CpuManager needs at least one node (a list of core ids)")
        self.pinner = Pinner(use_cgroup)
        self.cores = [CorePool(f"cpu@{i}", c) for i, c in enumerate(nodes)]
        self.memory = [CountPool(f"memory@{i}", memory_per_node) for i in range(len(nodes))]
        self.schedulers = [ActionScheduler({"cpu": self.cores[i]}, depth=depth, elastic=elastic)
                           for i in range(len(nodes))]
        self.trajectories: dict[Any, TrajectoryState] = {}
        self.workdir = workdir or tempfile.mkdtemp(prefix="rollart-cpu-")

    def place(self, trajectory: Any, memory: float, min_cores: int = 1) -> TrajectoryState:
        """The trajectory's node (chosen once: most free memory among nodes that fit)."""
        if trajectory in self.trajectories:
            return self.trajectories[trajectory]
        fits = [i for i in range(len(self.cores))
                if self.memory[i].free() >= memory and self.cores[i].capacity >= min_cores]
        if not fits:
            raise RuntimeError(f"no node has {memory} memory free for trajectory {trajectory!r}; "
                               "end finished trajectories or add nodes")
        node = max(fits, key=lambda i: self.memory[i].free())
        self.memory[node].acquire(memory)
        ws = os.path.join(self.workdir, f"traj-{len(self.trajectories)}-{os.getpid()}")
        os.makedirs(ws, exist_ok=True)
        state = self.trajectories[trajectory] = TrajectoryState(node, memory, ws)
        return state

    def end_trajectory(self, trajectory: Any) -> None:
        """Free the trajectory's memory and workspace (idempotent)."""
        state = self.trajectories.pop(trajectory, None)
        if state is not None:
            self.memory[state.node].release(state.memory)
            shutil.rmtree(state.workspace, ignore_errors=True)

    def command(self, trajectory: Any, argv: Sequence[str], *, units: Sequence[int] = (1,),
                elasticity=None, t_ori: Optional[float] = None, kind: str = "tool",
                timeout: float = 600.0, env: Optional[dict] = None) -> Action:
        """An action running ``argv`` (``{dop}`` -> core count, ``{xdist}`` -> core count or 0 for one
        core) in the trajectory's workspace."""
        async def payload(grant: dict) -> CommandResult:
            cores = grant["cpu"]
            return await self._run(trajectory, argv, cores, timeout, env)

        return Action({}, key="cpu", units=tuple(units), elasticity=elasticity, t_ori=t_ori,
                      kind=kind, trajectory=trajectory, payload=payload)

    async def submit(self, action: Action, memory: float = 1.0) -> Any:
        """Run ``action`` on its trajectory's node (placing the trajectory if new)."""
        state = self.place(action.trajectory, memory, action.min_units)
        return await self.schedulers[state.node].submit(action)

    async def _run(self, trajectory: Any, argv: Sequence[str], cores: tuple[int, ...],
                   timeout: float, env: Optional[dict]) -> CommandResult:
        state = self.trajectories[trajectory]
        dop = len(cores)
        args = [expand(a, dop) for a in argv]
        name = f"act-{os.getpid()}-{id(args)}-{time.monotonic_ns()}"
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=state.workspace, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=self.pinner.prepare(name, cores), env={**os.environ, **(env or {})})
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            proc.kill()
            await proc.wait()
            raise
        finally:
            self.pinner.cleanup(name)
        return CommandResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                             cores, time.monotonic() - t0)

    async def close(self) -> None:
        for s in self.schedulers:
            await s.close()
        for t in list(self.trajectories):
            self.end_trajectory(t)
        self.pinner.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
