"""SharedInferenceWorker: two jobs' requests on one engine, swapped through the StateManager tiers by HRRS; every
answer token for token equal to a private engine holding that job's weights (also after a job's weight update,
through the disk tier, and through a real actor process behind each job's own LLMProxy); each job's cached
prefixes kept across swaps while its weights stay, dropped when they change. Every request reaches the worker
as a typed message through the job's JobWorker view."""
import asyncio
import os

import pytest

from rollart.actors import LocalHandle
from rollart.inference.worker import InferenceWorker
from rollart.messages import (AbortRequest, GenerateRequest, GetStats, GetVersion, UpdateWeights, WeightAddress,
                              WeightEndpoint, WeightsDigest)
from rollart.multiplex.client import JobWorker
from rollart.multiplex.inference import SharedInferenceWorker
from rollart.multiplex.messages import RegisterJob
from rollart.types import SamplingParams, WeightBucket

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    root = tmp_path_factory.mktemp("mx-inference")
    return {job: str(make_tiny_model(root / job, seed=seed, hidden=64, layers=2, intermediate=128, vocab=256))
            for job, seed in (("A", 1), ("B", 2), ("B1", 3))}


def engine_cfg(model):
    return dict(model=model, max_num_seqs=16, num_kv_blocks=128, seed=0)


def request(job, i):
    prompt = [5 + i % 7, 9 + i % 5, 3 + i]
    return GenerateRequest(f"{job}-{i}", prompt, SamplingParams(temperature=1.0, max_tokens=6 + i % 4, seed=100 + i,
                                                                ignore_eos=True))


async def private_answers(model, reqs, weights=None):
    w = InferenceWorker(engine_cfg(model), name="private")
    try:
        if weights is not None:
            await w.update_weights(UpdateWeights.of(weights))
        return [(await w.generate(r)).token_ids for r in reqs]
    finally:
        await w.shutdown()


async def register(shared, models, *jobs):
    """Give the in-process shared worker these jobs; each job's view of it, as its LLMProxy would hold it."""
    for job in jobs:
        assert await shared.add_job(RegisterJob(job, models[job])) == 0
    local = LocalHandle(shared, "shared")
    return {job: JobWorker(local, job) for job in (*jobs, "C")}  # C: never registered


async def interleaved(view, n):
    """n requests per job, arriving interleaved A, B, A, B, ... all concurrently."""
    reqs = {job: [request(job, i) for i in range(n)] for job in ("A", "B")}
    order = [(job, r) for i in range(n) for job, r in (("A", reqs["A"][i]), ("B", reqs["B"][i]))]
    got = await asyncio.gather(*(view[job].send(r) for job, r in order))
    out = {"A": [], "B": []}
    for (job, _), res in zip(order, got):
        out[job].append(res.token_ids)
    return reqs, out


@pytest.mark.parametrize("tier", ["host", "disk"])
async def test_each_job_answered_with_its_own_weights(models, tmp_path, tier):
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path), offload_tier=tier)
    try:
        view = await register(shared, models, "A", "B")
        reqs, got = await interleaved(view, 6)
        assert got["A"] == await private_answers(models["A"], reqs["A"])
        assert got["B"] == await private_answers(models["B"], reqs["B"])
        assert got["A"] != got["B"]  # the two jobs' weights really differ
        st = shared.stats()
        assert st["switches"] >= 1 and st["busy_seconds"] > 0
        assert shared.state.tier("A" if st["active_job"] == "B" else "B") == tier  # the other job is offloaded
    finally:
        await shared.on_stop()


async def test_update_of_an_inactive_job_lands_in_its_offloaded_state(models, tmp_path):
    from safetensors.torch import load_file
    v1 = WeightBucket(1, load_file(os.path.join(models["B1"], "model.safetensors")))
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path))
    try:
        view = await register(shared, models, "A", "B")
        await view["A"].send(request("A", 0))  # A active, B offloaded
        assert shared.active == "A"
        assert await view["B"].send(UpdateWeights.of(v1)) == 1
        assert shared.active == "A" and await view["B"].send(GetVersion()) == 1
        reqs, got = await interleaved(view, 4)
        assert got["B"] == await private_answers(models["B"], reqs["B"], weights=v1)
        assert got["A"] == await private_answers(models["A"], reqs["A"])
        assert {v for job, v in shared.served() if job == "B"} == {1}  # B's tokens carry B's version
        assert {v for job, v in shared.served() if job == "A"} == {0}
    finally:
        await shared.on_stop()


async def test_inactive_job_waits_for_its_swap(models, tmp_path):
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path))
    greedy = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)  # long: suspended long before its end
    try:
        view = await register(shared, models, "A", "B")
        long = asyncio.create_task(view["A"].send(GenerateRequest("A-long", [5, 6], greedy)))
        while shared.active != "A" or shared.jobs["A"].running == 0:
            await asyncio.sleep(0.005)
        await shared.worker.suspend()  # A's request stays in flight until resume: no timing involved
        b = asyncio.create_task(view["B"].send(request("B", 0)))
        while not shared.jobs["B"].waiting:
            await asyncio.sleep(0.005)
        assert shared.target == "B" and shared.active == "A"  # queued: A drains first
        await shared.worker.resume()
        assert len((await long).token_ids) == 200
        await b
        assert shared.active == "B" and shared.jobs["B"].queued_s > 0
        long_b = asyncio.create_task(view["B"].send(GenerateRequest("B-long", [7, 8], greedy)))
        while shared.jobs["B"].running == 0:
            await asyncio.sleep(0.005)
        await shared.worker.suspend()
        queued = asyncio.create_task(view["A"].send(request("A", 1)))  # B is in flight: A queues
        while not shared.jobs["A"].waiting:
            await asyncio.sleep(0.005)
        assert await view["A"].send(AbortRequest("A-1")) is True  # aborted before reaching the engine
        res = await queued
        assert res.finish_reason == "abort" and res.token_ids == [] and not shared.jobs["A"].waiting
        await shared.worker.resume()
        assert len((await long_b).token_ids) == 200
        with pytest.raises(KeyError, match="not registered"):
            await view["C"].send(request("C", 0))
    finally:
        await shared.on_stop()


async def test_shared_worker_process_behind_two_proxies(models, tmp_path):
    from rollart.actors import ActorSystem
    from rollart.rollout.proxy import LLMProxy
    async with ActorSystem() as system:
        handle = await system.spawn("rollart.multiplex.inference:SharedInferenceWorker", engine_cfg(models["A"]),
                                    spill_dir=str(tmp_path), name="shared", mode="process")
        for job in ("A", "B"):
            assert await handle.send(RegisterJob(job, models[job])) == 0
        proxies = {job: LLMProxy([("shared", "cpu", JobWorker(handle, job))]) for job in ("A", "B")}
        reqs = {job: [request(job, i) for i in range(4)] for job in ("A", "B")}
        got = await asyncio.gather(*(proxies[job].generate(r.trajectory_id or r.request_id, r.prompt_token_ids,
                                                           r.sampling) for i in range(4) for job in ("A", "B")
                                     for r in [reqs[job][i]]))
        assert [g.token_ids for g in got[0::2]] == await private_answers(models["A"], reqs["A"])
        assert [g.token_ids for g in got[1::2]] == await private_answers(models["B"], reqs["B"])
        b = JobWorker(handle, "B")
        assert (await b.send(GetStats()))["switches"] >= 1 and (await handle.send(GetStats()))["switches"] >= 1
        assert b.alive and not b.supervised and b.restarts == 0 and await b.send(GetVersion()) == 0
        endpoint = await b.send(WeightAddress())  # B's own weight relay, where its pulls land
        assert isinstance(endpoint, WeightEndpoint) and endpoint.address
        assert endpoint.address != (await JobWorker(handle, "A").send(WeightAddress())).address
        with pytest.raises(Exception, match="answers no WeightsDigest message"):
            await b.send(WeightsDigest())


def long_request(job, rid, seed):
    """A 40-token prompt (two full KV blocks of 16 cacheable), greedy."""
    prompt = [(7 * i + seed) % 200 + 1 for i in range(40)]
    return GenerateRequest(f"{job}-{rid}", prompt, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))


@pytest.mark.parametrize("tier", ["host", "disk"])
async def test_swap_back_keeps_the_jobs_cached_prefixes(models, tmp_path, tier):
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path), offload_tier=tier)
    try:
        view = await register(shared, models, "A", "B")
        first = await view["A"].send(long_request("A", 0, seed=1))
        await view["B"].send(long_request("B", 0, seed=2))         # swap A out, B in
        again = await view["A"].send(long_request("A", 1, seed=1))  # swap back: same prompt, same weights
        assert shared.switches == 2
        assert again.num_cached_tokens == 32  # A's K/V survived B's turn (it was dropped at every swap before)
        assert [first.token_ids, again.token_ids] == await private_answers(
            models["A"], [long_request("A", 0, seed=1), long_request("A", 1, seed=1)])
        st = shared.stats()
        assert st["prefix_hit_rate_by_job"]["A"] == 32 / 80 and st["computed_prompt_tokens"] == 40 + 40 + 8
    finally:
        await shared.on_stop()


async def test_without_job_prefix_cache_every_swap_empties_it(models, tmp_path):
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path), job_prefix_cache=False)
    try:
        view = await register(shared, models, "A", "B")
        await view["A"].send(long_request("A", 0, seed=1))
        await view["B"].send(long_request("B", 0, seed=2))
        assert (await view["A"].send(long_request("A", 1, seed=1))).num_cached_tokens == 0
    finally:
        await shared.on_stop()


@pytest.mark.parametrize("active", [False, True])
async def test_new_weights_of_a_job_invalidate_its_cached_prefixes(models, tmp_path, active):
    """A's weights change (while it is out, or while it is active): its cached prefixes are dropped and the answer
    equals a fresh engine's holding the new weights; B's cached prefixes are kept."""
    from safetensors.torch import load_file
    v1 = WeightBucket(1, load_file(os.path.join(models["B1"], "model.safetensors")))
    shared = SharedInferenceWorker(engine_cfg(models["A"]), spill_dir=str(tmp_path))
    try:
        view = await register(shared, models, "A", "B")
        await view["B"].send(long_request("B", 0, seed=2))
        await view["A"].send(long_request("A", 0, seed=1))
        if not active:
            await view["B"].send(long_request("B", 1, seed=3))  # A out
        assert (shared.active == "A") == active
        assert await view["A"].send(UpdateWeights.of(v1)) == 1
        out = await view["A"].send(long_request("A", 1, seed=1))
        assert out.num_cached_tokens == 0 and out.versions == [1] * 6
        assert out.token_ids == (await private_answers(models["A"], [long_request("A", 1, seed=1)], weights=v1))[0]
        assert (await view["B"].send(long_request("B", 2, seed=2))).num_cached_tokens == 32
    finally:
        await shared.on_stop()
