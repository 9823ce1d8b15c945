"""GPU-service manager: judge models restored from their disk copies and evicted (LRU) under a memory budget;
a restored judge scores exactly like a freshly built one; service calls are scheduler actions with metrics."""
import asyncio

import pytest

from rollart.actions.config import ActionsConfig
from rollart.actions.run import RunActions
from rollart.actions.services import ServiceManager
from rollart.rewards.judge_model import judge_models, score

JUDGES = judge_models(3)


def test_services_are_restored_from_disk_and_evicted_within_the_budget():
    sizes = ServiceManager(JUDGES).bytes
    budget = max(sizes.values()) * 1.05  # room for the biggest judge alone
    sm = ServiceManager(JUDGES, memory_budget_bytes=budget)
    chunk = (0, 0, 1)
    for name in ["judge0", "judge1", "judge2", "judge0", "judge0"]:
        got = sm.run(name, chunk, score, "def f(): return 1", "ref")
        assert got == pytest.approx(score(JUDGES[name](), "def f(): return 1", "ref"), rel=1e-6)
        assert sm.resident_bytes() <= budget  # counted from the live tensors
    assert sm.cache.restores == 4 and sm.cache.hits == 1 and sm.cache.evictions >= 3
    with pytest.raises(ValueError, match="service_memory_mb"):
        ServiceManager(JUDGES, memory_budget_bytes=min(sizes.values()))


async def test_service_calls_are_actions_and_report_restores_and_evictions():
    sizes = ServiceManager(JUDGES).bytes
    sm = ServiceManager(JUDGES, memory_budget_bytes=max(sizes.values()) * 1.05)
    actions = RunActions(ActionsConfig(enabled=True), services=sm)
    try:
        scores = await asyncio.gather(*(actions.service_call(n, score, "x = 1", "") for n in JUDGES for _ in range(2)))
        assert all(0 < s <= 1 for s in scores)
        m = actions.metrics()
        assert m["system/actions/reward_model/count"] == 6 and m["system/actions/reward_model/units_mean"] == 1
        assert m["system/actions/service/restores"] >= 3 and m["system/actions/service/evictions"] >= 2
        assert m["system/actions/service/restore_s_mean"] > 0
    finally:
        await actions.close()
