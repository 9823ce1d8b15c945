"""Actor death over real processes: kill -9 and hangs are detected, pending calls fail with ActorDeadError, restarts."""
import asyncio
import os
import signal
import sys

import pytest

from rollart.actors import ActorDeadError, ActorSystem, RestartPolicy

from sample_actors import Echo

HB_INTERVAL, HB_TIMEOUT = 0.2, 1.5
DEADLINE = HB_TIMEOUT + 10  # a hang guard for awaits, not a speed assertion


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split()[2] != "Z"


async def wait_until(cond, what: str) -> None:
    for _ in range(int(DEADLINE / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def hb_system():
    async with ActorSystem(heartbeat_interval=HB_INTERVAL, heartbeat_timeout=HB_TIMEOUT) as s:
        yield s


async def test_kill_9_fails_pending_calls_then_restart_brings_it_back(hb_system):
    h = await hb_system.spawn(Echo, "r", name="victim", restart=RestartPolicy(max_restarts=2, backoff=0.05))
    old_pid = await h.getpid()
    pending = [asyncio.ensure_future(h.sleep(60, str(i))) for i in range(3)]
    await asyncio.sleep(0.2)
    os.kill(old_pid, signal.SIGKILL)
    for fut in pending:
        with pytest.raises(ActorDeadError, match="victim.*exited with code -9"):
            await asyncio.wait_for(fut, DEADLINE)
    # calls made while it restarts wait for the new incarnation
    new_pid = await asyncio.wait_for(h.getpid(), DEADLINE)
    assert new_pid != old_pid and h.restarts == 1 and h.state == "ready"
    assert (await h.info())["tag"] == "r"  # fresh constructor, same args
    assert await h.add(1, 2) == 3


async def test_hung_process_is_detected_by_missing_heartbeats(hb_system):
    h = await hb_system.spawn(Echo, name="hung", restart=RestartPolicy(max_restarts=1, backoff=0.05))
    old_pid = await h.getpid()
    pending = asyncio.ensure_future(h.sleep(60))
    await asyncio.sleep(0.2)
    os.kill(old_pid, signal.SIGSTOP)  # alive but silent: only heartbeats can tell
    try:
        with pytest.raises(ActorDeadError, match="no heartbeat for"):
            await asyncio.wait_for(pending, DEADLINE)
        new_pid = await asyncio.wait_for(h.getpid(), DEADLINE)
        assert new_pid != old_pid and h.restarts == 1
        for _ in range(100):  # the coordinator SIGKILLs the hung incarnation
            if not pid_alive(old_pid):
                break
            await asyncio.sleep(0.05)
        assert not pid_alive(old_pid)
    finally:
        if pid_alive(old_pid):
            os.kill(old_pid, signal.SIGKILL)


async def test_restarts_exhausted_marks_dead_and_notifies(hb_system):
    notified = []
    h = await hb_system.spawn(Echo, name="fragile", restart=RestartPolicy(max_restarts=1, backoff=0.01),
                              on_dead=lambda name, reason: notified.append((name, reason)))
    os.kill(await h.getpid(), signal.SIGKILL)
    await wait_until(lambda: h.restarts == 1 and h.state == "ready", "restart 1 of 1")
    os.kill(await h.getpid(), signal.SIGKILL)
    await wait_until(lambda: notified, "the on_dead callback")
    assert notified and notified[0][0] == "fragile" and "exited with code -9" in notified[0][1]
    assert h.state == "dead" and not h.alive
    with pytest.raises(ActorDeadError, match="fragile"):
        await h.add(1, 1)


async def test_stop_fails_pending_calls_and_ends_the_process(hb_system):
    h = await hb_system.spawn(Echo, name="stopme")
    pid = await h.getpid()
    pending = asyncio.ensure_future(h.sleep(60))
    await asyncio.sleep(0.2)
    await h.stop()
    with pytest.raises(ActorDeadError, match="stopped"):
        await pending
    assert h.state == "stopped" and not pid_alive(pid)
    with pytest.raises(ActorDeadError):
        await h.add(1, 1)
    # the name can be reused after a stop
    h2 = await hb_system.spawn(Echo, name="stopme", mode="inprocess")
    assert await h2.add(2, 2) == 4


async def test_in_process_actor_stop_runs_on_stop():
    import sample_actors
    async with ActorSystem() as s:
        eng = await s.spawn(sample_actors.Engine, name="eng", mode="inprocess")
        assert await eng.generate("ab") == "ba"
        await eng.stop()
        assert eng.state == "stopped"
        assert sample_actors.STOP_LOG[-1] == "engine stopped after 1 steps"


async def test_actor_processes_die_with_their_coordinator(tmp_path):
    """A coordinator process killed with SIGKILL leaves no actor process behind."""
    script = tmp_path / "coord.py"
    script.write_text(
        "import asyncio, sys\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "from rollart.actors import ActorSystem\n"
        "async def main():\n"
        "    s = await ActorSystem().start()\n"
        "    h = await s.spawn('sample_actors:Echo', name='orphan')\n"
        "    print(await h.getpid(), flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n")
    proc = await asyncio.create_subprocess_exec(sys.executable, str(script), stdout=asyncio.subprocess.PIPE)
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    actor_pid = int(line)
    assert pid_alive(actor_pid)
    proc.kill()
    await proc.wait()
    for _ in range(100):
        if not pid_alive(actor_pid):
            break
        await asyncio.sleep(0.05)
    assert not pid_alive(actor_pid)


async def test_silent_but_busy_process_is_not_declared_hung():
    """The heartbeat judge tells a process starving its heartbeat thread (using CPU) from a hung one."""
    import subprocess
    import sys
    import time

    from rollart.actors.liveness import busy_not_hung
    from rollart.actors.record import ActorRecord

    def judge(rec, silent):
        return busy_not_hung(rec, silent, heartbeat_timeout=0.5)

    procs = {"busy": subprocess.Popen([sys.executable, "-c", "while True: pass"]),
             "sleeping": subprocess.Popen(["sleep", "60"]),
             "stopped": subprocess.Popen(["sleep", "60"])}
    os.kill(procs["stopped"].pid, signal.SIGSTOP)
    try:
        recs = {}
        for name, p in procs.items():
            rec = ActorRecord(name, "x:Y", [], {}, "process", RestartPolicy(), {})
            rec.proc, rec.pid = p, p.pid
            recs[name] = rec
        for _ in range(200):  # SIGSTOP lands asynchronously
            with open(f"/proc/{procs['stopped'].pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.05)
        assert not judge(recs["stopped"], 1.0)
        verdicts = {name: [] for name in ("busy", "sleeping")}
        for _ in range(12):  # 1.2 s > heartbeat_timeout: the sleeper must be judged hung by then
            for name in verdicts:
                verdicts[name].append(judge(recs[name], 1.0))
            time.sleep(0.1)
        assert all(verdicts["busy"])
        assert verdicts["sleeping"][0] and not verdicts["sleeping"][-1]
        assert not judge(recs["busy"], 10.0)  # beyond BUSY_GRACE x timeout: dead anyway
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
