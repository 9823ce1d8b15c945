"""CPU manager: real processes pinned (cgroup cpuset or affinity) to granted cores, trajectory state kept, elastic pytest -n."""
import asyncio
import os
import sys

import pytest

from rollart.actions.action import amdahl
from rollart.actions.cpu import CGROUP_ROOT, CpuManager, expand

SHOW = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0))); "
        "print(open('/proc/self/cgroup').read())"]


@pytest.mark.parametrize("use_cgroup", [True, False])
async def test_action_runs_pinned_to_its_cores(use_cgroup):
    if use_cgroup and not os.access(CGROUP_ROOT, os.W_OK):
        pytest.skip(f"{CGROUP_ROOT} not writable here")
    mgr = CpuManager([[0, 1]], memory_per_node=4, use_cgroup=use_cgroup)
    try:
        results = await asyncio.gather(*(mgr.submit(mgr.command(f"t{i}", SHOW)) for i in range(4)))
        for r in results:
            assert r.returncode == 0, r.stderr
            assert r.stdout.splitlines()[0] == str(list(r.cores)) and len(r.cores) == 1
            if use_cgroup:
                assert f"rollart-{os.getpid()}/act-" in r.stdout  # really inside its cpuset
        assert mgr.cores[0].used == 0 and sorted(mgr.cores[0].free_cores) == [0, 1]
    finally:
        await mgr.close()


async def test_trajectory_state_stays_between_actions_and_memory_is_held():
    mgr = CpuManager([[0], [1]], memory_per_node=3)
    try:
        write = [sys.executable, "-c", "open('state.txt','w').write('42')"]
        read = [sys.executable, "-c", "print(open('state.txt').read())"]
        await mgr.submit(mgr.command("a", write), memory=2)
        await mgr.submit(mgr.command("b", write), memory=2)
        # memory balance put the two trajectories on different nodes; each keeps its node
        assert mgr.trajectories["a"].node != mgr.trajectories["b"].node
        out = await mgr.submit(mgr.command("a", read))
        assert out.stdout.strip() == "42" and out.cores == (mgr.trajectories["a"].node,)
        with pytest.raises(RuntimeError, match="no node has 2 memory free"):
            await mgr.submit(mgr.command("c", read), memory=2)
        mgr.end_trajectory("a")
        assert mgr.memory[0].used + mgr.memory[1].used == 2
    finally:
        await mgr.close()


SUITE = """
import os, time
def busy(seconds):
    with open("workers.txt", "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
{tests}
"""


def test_xdist_placeholder_runs_in_process_on_one_core():
    assert expand("-n{dop}", 1) == "-n1" and expand("{xdist}", 1) == "0"
    assert expand("{xdist}", 4) == "4" and expand("{dop}/{xdist}", 2) == "2/2"


async def test_elastic_test_run_uses_pytest_xdist_with_granted_cores():
    mgr = CpuManager([[0, 1]], memory_per_node=4)
    try:
        tests = "\n".join(f"def test_{i}():\n    busy(0.02)\n" for i in range(4))
        make = [sys.executable, "-c", f"open('test_gen.py','w').write({SUITE.format(tests=tests)!r})"]
        await mgr.submit(mgr.command("t", make))
        run = mgr.command("t", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-n", "{xdist}", "test_gen.py"], units=(1, 2),
                          elasticity=amdahl(0.9), t_ori=2.0, kind="reward_test")
        result = await mgr.submit(run)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "4 passed" in result.stdout
        assert len(result.cores) == 2  # idle node: the scheduler scaled the test run to both cores
        seen = await mgr.submit(mgr.command("t", [sys.executable, "-c", "print(open('workers.txt').read())"]))
        assert set(seen.stdout.split()) == {"gw0", "gw1"}  # pytest -n 2 really ran two workers
    finally:
        await mgr.close()
