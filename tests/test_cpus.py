"""CPU pinning: parsing core lists, pinning this process and restoring it, actor processes honouring ROLLART_CPUS."""
import os

import pytest

from rollart.actors import ActorSystem
from rollart.cpus import ENV_VAR, parse_cpus, pinned


def test_parse_cpus():
    assert parse_cpus("0") == {0}
    assert parse_cpus("0,2-3") == {0, 2, 3}
    for bad in ("", "a", "1-x", ","):
        with pytest.raises(ValueError, match=ENV_VAR):
            parse_cpus(bad)


def test_pinned_restores_and_rejects_missing_cores():
    before = os.sched_getaffinity(0)
    with pinned({0}):
        assert os.sched_getaffinity(0) == {0}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match="this machine has cores"):
        with pinned({os.cpu_count() + 7}):
            pass
    assert os.sched_getaffinity(0) == before


class AffinityProbe:
    def affinity(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))


async def test_actor_process_is_pinned_by_env():
    core = max(os.sched_getaffinity(0))
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=10.0) as system:
        probe = await system.spawn(AffinityProbe, name="probe", env={ENV_VAR: str(core)})
        assert await probe.affinity() == [core]
        free = await system.spawn(AffinityProbe, name="free")
        assert await free.affinity() == sorted(os.sched_getaffinity(0))
