"""LLMProxy with in-process workers on the tiny model: routing by task, fallback, sticky, balancing, suspend/resume, abort, cancel, PD."""
import asyncio
import os

import pytest

from rollart.inference.worker import InferenceWorker
from rollart.actors import LocalHandle
from rollart.rollout.proxy import LLMProxy, NoWorkerError, ProxyConfig, UnknownTaskError
from rollart.types import InvalidRequestError, WeightBucket
from rollart.messages import GetVersion

os.environ.setdefault("HF_HUB_OFFLINE", "1")
GREEDY = dict(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


@pytest.fixture
async def make_proxy(tiny_model):
    made = []

    async def make(classes, **cfg):
        workers = [InferenceWorker(dict(model=tiny_model, num_kv_blocks=256), name=f"{c}-{i}", hw_class=c)
                   for i, c in enumerate(classes)]
        made.extend(workers)
        return LLMProxy([(w.name, w.hw_class, LocalHandle(w, w.name)) for w in workers], ProxyConfig(**cfg)), workers

    yield make
    for w in made:
        await w.shutdown()


async def test_routes_by_task(make_proxy):
    proxy, _ = await make_proxy(["H800", "H20"], hw_affinity={"frozenlake": "H800", "math": "H20", "default": "H20"})
    fl = await proxy.generate("t1", [5, 6, 7], dict(GREEDY, max_tokens=3), task="frozenlake")
    math = await proxy.generate("t2", [5, 6, 7], dict(GREEDY, max_tokens=3), task="math")
    other = await proxy.generate("t3", [5, 6, 7], dict(GREEDY, max_tokens=3), task="sokoban")
    assert (fl.worker, math.worker, other.worker) == ("H800-0", "H20-1", "H20-1")
    assert fl.token_ids == math.token_ids  # same model on both classes


async def test_unknown_task_is_a_clear_error(make_proxy):
    proxy, _ = await make_proxy(["H800"], hw_affinity={"frozenlake": "H800"})
    with pytest.raises(UnknownTaskError, match=r"unknown task 'webshop'.*frozenlake"):
        await proxy.generate("t", [5], dict(GREEDY, max_tokens=1), task="webshop")
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        await proxy.generate("t", [], dict(GREEDY), task="frozenlake")


async def test_bad_requests_get_one_clear_error_at_the_proxy(make_proxy):
    proxy, (worker,) = await make_proxy(["cpu"])
    good = asyncio.create_task(proxy.generate("g", [5, 6], dict(GREEDY, max_tokens=20)))
    bad = [("text", "hello", dict(GREEDY), "integer token ids"),
           ("none", [5, None], dict(GREEDY), "integer token ids"),
           ("temp", [5], dict(temperature=-1.0), "temperature"),
           ("topp", [5], dict(top_p=0.0), "top_p"),
           ("unknown", [5], dict(temprature=0.5), "unknown sampling"),
           ("maxtok", [5], dict(max_tokens=0), "max_tokens"),
           ("kind", [5], [0.5], "sampling must be")]
    for tid, prompt, sampling, msg in bad:
        with pytest.raises(InvalidRequestError, match=msg):
            await proxy.generate(tid, prompt, sampling)
    assert worker.stats()["requests"] <= 1  # none of them reached the worker
    # what only the engine can judge (the context length) comes back as the same error type
    with pytest.raises(InvalidRequestError, match="max_model_len"):
        await proxy.generate("long", [5] * 5000, dict(GREEDY))
    assert len((await good).token_ids) == 20


async def test_falls_back_to_compatible_class(make_proxy):
    proxy, _ = await make_proxy(["H20"], hw_affinity={"frozenlake": "H800"})
    res = await proxy.generate("t", [5, 6], dict(GREEDY, max_tokens=2), task="frozenlake")
    assert res.worker == "H20-0" and proxy.counters["fallbacks"] == 1
    strict, _ = await make_proxy(["H20"], hw_affinity={"frozenlake": "H800"}, fallback={"H800": []})
    with pytest.raises(NoWorkerError, match="H800"):
        await strict.generate("t", [5, 6], dict(GREEDY, max_tokens=2), task="frozenlake")


async def test_sticky_per_trajectory_reuses_prefix(make_proxy):
    proxy, workers = await make_proxy(["cpu", "cpu"])
    history = list(range(5, 60))
    first = await proxy.generate("traj", history, dict(GREEDY, max_tokens=4))
    # make the sticky worker the busier one: balance alone would now pick the other worker
    busy = [asyncio.create_task(proxy.generate(f"o{i}", [5, 6], dict(GREEDY, max_tokens=n)))
            for i, n in enumerate((300, 900))]
    await asyncio.sleep(0)
    loads = {name: w.outstanding for name, w in proxy.workers.items()}
    assert loads[first.worker] == max(loads.values()) > min(loads.values())
    second = await proxy.generate("traj", history + first.token_ids + [7, 8], dict(GREEDY, max_tokens=4))
    assert second.worker == first.worker
    assert second.num_cached_tokens >= 48
    for t in busy:
        t.cancel()


async def test_least_outstanding_tokens_balances(make_proxy):
    proxy, workers = await make_proxy(["cpu", "cpu", "cpu"])
    tasks = [asyncio.create_task(proxy.generate(f"t{i}", [5, 6, 7], dict(GREEDY, max_tokens=30)))
             for i in range(6)]
    await asyncio.sleep(0)
    assert sorted(w.outstanding for w in proxy.workers.values()) == [66, 66, 66]
    results = await asyncio.gather(*tasks)
    assert sorted(r.worker for r in results) == sorted(["cpu-0", "cpu-1", "cpu-2"] * 2)
    # a heavier request then goes to the least loaded worker
    heavy = asyncio.create_task(proxy.generate("h", [5] * 40, dict(GREEDY, max_tokens=200)))
    await asyncio.sleep(0)
    light = await proxy.generate("l", [5], dict(GREEDY, max_tokens=2))
    assert light.worker != (await heavy).worker


async def test_suspend_admits_nothing_and_keeps_inflight(make_proxy):
    proxy, workers = await make_proxy(["cpu"])
    w = workers[0]
    inflight = asyncio.create_task(proxy.generate("a", [5, 6], dict(GREEDY, max_tokens=40)))
    await asyncio.sleep(0)
    await proxy.suspend()
    admitted = []
    waiting = [asyncio.create_task(proxy.generate(f"b{i}", [5, 6], dict(GREEDY, max_tokens=2)))
               for i in range(3)]
    for t in waiting:
        t.add_done_callback(lambda t: admitted.append(t.result().worker))
    res = await inflight  # the in-flight request finishes while suspended
    assert len(res.token_ids) == 40
    assert w.stats()["requests"] == 1 and not any(t.done() for t in waiting)
    await proxy.resume()
    await asyncio.gather(*waiting)
    assert w.stats()["requests"] == 4


async def test_abort_trajectory_running_and_waiting(make_proxy):
    proxy, workers = await make_proxy(["cpu"])
    running = asyncio.create_task(proxy.generate("x", [5, 6], dict(GREEDY, max_tokens=1000)))
    while workers[0].stats()["steps"] < 2:
        await asyncio.sleep(0.01)
    await proxy.suspend()
    waiting = asyncio.create_task(proxy.generate("y", [5, 6], dict(GREEDY, max_tokens=2)))
    await asyncio.sleep(0)
    assert await proxy.abort("x") == 1 and await proxy.abort("y") == 1
    assert (await running).finish_reason == "abort"
    assert (await waiting).finish_reason == "abort"
    await proxy.resume()
    assert workers[0].stats()["requests"] == 1


async def test_cancel_aborts_in_engine(make_proxy):
    proxy, workers = await make_proxy(["cpu"])
    task = asyncio.create_task(proxy.generate("c", [5, 6], dict(GREEDY, max_tokens=1000)))
    engine = workers[0].engine
    while not engine.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await proxy.generate("d", [5], dict(GREEDY, max_tokens=1))
    assert not engine.requests and proxy.workers["cpu-0"].outstanding == 0


async def test_update_weights_reaches_every_worker(make_proxy, tiny_model):
    from safetensors.torch import load_file
    proxy, workers = await make_proxy(["H800", "H20"])
    weights = load_file(os.path.join(tiny_model, "model.safetensors"))
    assert sorted(await proxy.update_weights(WeightBucket.of(3, weights))) == ["H20-1", "H800-0"]
    assert [await w.get_version(GetVersion()) for w in workers] == [3, 3]
    res = await proxy.generate("v", [5], dict(GREEDY, max_tokens=2))
    assert res.versions == [3, 3]


async def test_pd_disaggregation_matches_colocated(make_proxy):
    colocated, _ = await make_proxy(["H800"])
    pd, pd_workers = await make_proxy(["H800", "H20"], pd_prefill_class="H800", pd_decode_class="H20")
    prompt = list(range(5, 45))
    ref = await colocated.generate("t", prompt, dict(GREEDY, max_tokens=12))
    res = await pd.generate("t", prompt, dict(GREEDY, max_tokens=12))
    assert res.token_ids == ref.token_ids and res.worker == "H800-0->H20-1"
    assert res.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
    assert pd.counters["pd_kv_tokens"] == len(prompt) and pd.counters["pd_reprefill_tokens"] == 0
    prefill, decode = (w.engine.stats() for w in pd_workers)
    assert decode.computed_prompt_tokens == 0 and decode.extra["imported_kv_tokens"] == len(prompt)
    assert decode.extra["forward_tokens"] == 11  # one decode token per step: the prompt was never forwarded there
    assert prefill.extra["forward_tokens"] == len(prompt)


async def test_from_cluster_uses_the_resource_managers_bindings(tiny_model):
    from rollart.actors import ActorSystem
    from rollart.distributed import Cluster, ResourceManager
    async with ActorSystem() as system:
        rm = ResourceManager({"H800": 1, "H20": 1})
        cluster = Cluster(InferenceWorker, rm, n=2, system=system, mode="inprocess", verbose=False,
                          placement={"H800": 1, "H20": 1},
                          worker_kwargs=dict(engine=dict(model=tiny_model, num_kv_blocks=128)))
        await cluster.start()
        try:
            proxy = LLMProxy.from_cluster(cluster, ProxyConfig(hw_affinity={"frozenlake": "H800", "math": "H20"}))
            by_class = {m.hw_class: m.name for m in cluster.members}
            fl = await proxy.generate("a", [5, 6], dict(GREEDY, max_tokens=2), task="frozenlake")
            math = await proxy.generate("b", [5, 6], dict(GREEDY, max_tokens=2), task="math")
            assert (fl.worker, math.worker) == (by_class["H800"], by_class["H20"])
            assert await cluster.members[0].handle.call("ping") == cluster.members[0].name  # rollart_bind ran
        finally:
            await cluster.shutdown()
