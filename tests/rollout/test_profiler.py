"""Online hardware profiler: its decision rule, hysteresis, hw_affinity=auto in the proxy with real workers."""
import asyncio

import pytest

from rollart.config import ConfigError, apply_overrides
from rollart.rollout.profiler import HardwareProfiler
from rollart.rollout.proxy_config import ProxyConfig

# seconds per token: prefill-heavy tags are 3x cheaper on H800, decode-heavy ones 1.25x cheaper on H20
COST = {("prefill", "H800"): 1.0, ("prefill", "H20"): 3.0, ("decode", "H800"): 5.0, ("decode", "H20"): 4.0}


def feed(p: HardwareProfiler, tags: dict[str, str], n: int, start: int = 0, cost=COST) -> None:
    """``n`` requests round-robin over ``tags`` (name -> kind) and over both classes, one trajectory each."""
    for i in range(start, start + n):
        tag = list(tags)[i % len(tags)]
        kind = tags[tag]
        hw = ("H800", "H20")[(i // len(tags)) % 2]
        pre, dec = (1000, 10) if kind == "prefill" else (100, 1000)
        p.record(tag, hw, pre, dec, cost[(kind, hw)] * (pre if kind == "prefill" else dec) / 1000, f"t{i}")


def test_each_tag_goes_where_it_saves_most_as_far_as_capacity_allows():
    p = HardwareProfiler({"H800": 3, "H20": 1}, min_samples=4, min_interval=20)
    assert p.propose() is None and p.mapping == {}  # no knowledge: every tag on any worker
    feed(p, {"fl": "prefill", "web": "prefill", "math": "decode", "game": "decode"}, 200)
    # H20 has a quarter of the workers: room for one of the two decode-heavy tags (they save the same per
    # token; math makes more tokens per trajectory here only if its tokens differ, so either may win)
    assert p.mapping["fl"] == p.mapping["web"] == "H800"
    assert sorted([p.mapping["math"], p.mapping["game"]]) == ["H20", "H800"]
    assert "fl->H800" in p.describe() and p.metrics()["rollout/hw_cost_ms/fl/H800"] == pytest.approx(1.0)


def test_capacity_share_keeps_one_class_from_taking_everything():
    # H800 is faster at everything, but it has half the workers: the tag that loses least moves to H20
    cost = {("prefill", "H800"): 1.0, ("prefill", "H20"): 4.0, ("decode", "H800"): 4.0, ("decode", "H20"): 4.5}
    p = HardwareProfiler({"H800": 1, "H20": 1}, min_samples=4, min_interval=20)
    feed(p, {"fl": "prefill", "math": "decode"}, 200, cost=cost)
    assert p.mapping == {"fl": "H800", "math": "H20"}


def test_revision_needs_two_agreeing_proposals_then_follows_the_mix():
    p = HardwareProfiler({"H800": 1, "H20": 1}, window=20, min_samples=4, min_interval=10)
    feed(p, {"a": "prefill", "b": "decode"}, 100)
    assert p.mapping == {"a": "H800", "b": "H20"} and p.changes == 1
    # the classes' speeds swap: one revision seeing it does not flip the mapping, the next one does
    swapped = {("prefill", "H800"): 3.0, ("prefill", "H20"): 1.0, ("decode", "H800"): 4.0, ("decode", "H20"): 5.0}
    changes = []
    for i in range(100, 300, 10):
        feed(p, {"a": "prefill", "b": "decode"}, 10, start=i, cost=swapped)
        changes.append(p.changes)
    assert p.mapping == {"a": "H20", "b": "H800"}
    assert p.changes == 2  # one change, no flapping back and forth
    first = changes.index(2)
    assert first >= 1 and all(c == 2 for c in changes[first:])


def test_bad_hw_affinity_value_is_one_clear_line():
    with pytest.raises(ConfigError, match=r"hw_affinity='autp': give 'auto'.*or a JSON object") as e:
        ProxyConfig(hw_affinity="autp")
    assert "\n" not in str(e.value)
    from rollart.pipeline.config import PipelineConfig
    cfg = apply_overrides(PipelineConfig(), ["proxy.hw_affinity=auto"])
    assert cfg.proxy.hw_affinity == "auto"
    from rollart.rollout.routing import check_hw_affinity
    check_hw_affinity(cfg.proxy.hw_affinity, ["H20"], ["AnyTask"])  # 'auto' routes every task: nothing to check
    assert apply_overrides(PipelineConfig(), ['proxy.hw_affinity={"x": "H20"}']).proxy.hw_affinity == {"x": "H20"}


def test_router_in_auto_mode_follows_the_profilers_mapping():
    from rollart.rollout.routing import Router
    from rollart.rollout.worker_slot import WorkerSlot

    slots = {n: WorkerSlot(n, hw, handle=None) for n, hw in (("a", "H800"), ("b", "H20"))}
    profiler = HardwareProfiler({"H800": 1, "H20": 1}, min_samples=4, min_interval=20)
    r = Router(slots, ProxyConfig(hw_affinity="auto"), dict(fallbacks=0, spills=0), profiler)
    assert r.resolve_task("fl") is None  # nothing measured: any worker, no UnknownTaskError
    feed(profiler, {"fl": "prefill", "math": "decode"}, 100)
    assert r.resolve_task("fl") == "H800" and r.pick("t", r.resolve_task("math")).name == "b"
    assert r.resolve_task("unseen") is None


@pytest.mark.slow
def test_proxy_auto_learns_prefill_to_h800_decode_to_h20_on_real_workers(tiny_model_dir):
    """Two real InferenceWorkers (tiny model) that sleep a Qwen3-8B step's time on H800 / H20."""
    from rollart.inference.worker import InferenceWorker
    from rollart.actors import LocalHandle
    from rollart.rollout.proxy import LLMProxy

    async def main():
        workers = [InferenceWorker(dict(model=tiny_model_dir, num_kv_blocks=1024, max_num_batched_tokens=1024),
                                   name=hw, hw_class=hw, speed=dict(hw_class=hw, time_scale=5.0))
                   for hw in ("H800", "H20")]
        proxy = LLMProxy([(w.name, w.hw_class, LocalHandle(w, w.name)) for w in workers], ProxyConfig(hw_affinity="auto"))
        proxy.profiler.min_samples, proxy.profiler.min_interval = 3, 12
        served = {}
        try:
            for rnd in range(12):
                # the two kinds arrive in alternate waves: measured wall time includes whatever else the worker
                # runs, and a 1000-token prefill on the H20 would hold up a decode sharing its steps
                task = ("prefill", "decode")[rnd % 2]

                async def one(i, task):
                    long = task == "prefill"
                    prompt = [(rnd * 997 + i * 131 + j * 7) % 400 + 3 for j in range(1000 if long else 3)]
                    sampling = dict(temperature=0.0, ignore_eos=True, max_tokens=1 if long else 32)
                    r = await proxy.generate(f"{task}-{rnd}-{i}", prompt, sampling, task=task)
                    served.setdefault((rnd, task), set()).add(r.worker)
                await asyncio.gather(*(one(i, task) for i in range(8)))
                if proxy.profiler.mapping.keys() == {"prefill", "decode"}:
                    break
        finally:
            for w in workers:
                await w.shutdown()
        return proxy, served, rnd

    proxy, served, rnd = asyncio.run(main())
    assert proxy.profiler.mapping == {"prefill": "H800", "decode": "H20"}, proxy.profiler.describe()
    assert served[(0, "prefill")] == {"H800", "H20"}  # no knowledge at first: both classes serve it
    assert proxy.profiler.cost("prefill", "H20") > 2 * proxy.profiler.cost("prefill", "H800")
    assert proxy.resolve_task("prefill") == "H800" and proxy.resolve_task("new-task") is None
