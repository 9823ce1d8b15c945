"""GPU-service manager: judge models restored from their disk copies and evicted (LRU) under a memory budget;
a restored judge scores exactly like a freshly built one; service calls are scheduler actions with metrics."""
import asyncio
import functools

import pytest

from rollart.actions.config import ActionsConfig
from rollart.actions.run import RunActions
from rollart.actions.services import ServiceManager
from rollart.rewards.judges import judge_factories, judge_tokenizers, score
from rollart.tools.make_tiny_model import make_tiny_model


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    """Three judge folders of different sizes (hidden 64 / 128 / 192): their factories and tokenizers."""
    root = tmp_path_factory.mktemp("judges")
    folders = [str(make_tiny_model(root / f"j{i}", hidden=64 * (i + 1), heads=i + 1, kv_heads=i + 1, seed=i))
               for i in range(3)]
    return judge_factories(folders), judge_tokenizers(folders)


def scorer(tokenizers, name):
    return functools.partial(lambda tok, model, text, ref: score(model, tok, text, ref), tokenizers[name])


def test_services_are_restored_from_disk_and_evicted_within_the_budget(judges):
    factories, tokenizers = judges
    names = list(factories)
    sizes = ServiceManager(factories).bytes
    assert len(set(sizes.values())) == 3
    budget = max(sizes.values()) * 1.05  # room for the biggest judge alone
    sm = ServiceManager(factories, memory_budget_bytes=budget)
    chunk = (0, 0, 1)
    for name in [names[0], names[1], names[2], names[0], names[0]]:
        got = sm.run(name, chunk, scorer(tokenizers, name), "def f(): return 1", "ref")
        assert got == pytest.approx(score(factories[name](), tokenizers[name], "def f(): return 1", "ref"), rel=1e-6)
        assert sm.resident_bytes() <= budget  # counted from the live tensors
    assert sm.cache.restores == 4 and sm.cache.hits == 1 and sm.cache.evictions >= 3
    with pytest.raises(ValueError, match="service_memory_mb"):
        ServiceManager(factories, memory_budget_bytes=min(sizes.values()))


async def test_service_calls_are_actions_and_report_restores_and_evictions(judges):
    factories, tokenizers = judges
    sizes = ServiceManager(factories).bytes
    sm = ServiceManager(factories, memory_budget_bytes=max(sizes.values()) * 1.05)
    actions = RunActions(ActionsConfig(enabled=True), services=sm)
    try:
        scores = await asyncio.gather(*(actions.service_call(n, scorer(tokenizers, n), "x = 1", "")
                                        for n in factories for _ in range(2)))
        assert all(0 < s <= 1 for s in scores)
        m = actions.metrics()
        assert m["system/actions/reward_model/count"] == 6 and m["system/actions/reward_model/units_mean"] == 1
        assert m["system/actions/service/restores"] >= 3 and m["system/actions/service/evictions"] >= 2
        assert m["system/actions/service/restore_s_mean"] > 0
    finally:
        await actions.close()
