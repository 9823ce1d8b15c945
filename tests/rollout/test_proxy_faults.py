"""LLMProxy over real InferenceWorker processes: kill -9 mid-rollout -> restart in place (the restarted worker
pulls the latest weights from the store itself), then removal and rerouting to a compatible class with nothing
lost or duplicated; cancellation reaches the worker process."""
import asyncio
import os
import signal

import pytest

from rollart.actors import ActorSystem, RestartPolicy
from rollart.inference.worker import InferenceWorker
from rollart.rollout.proxy import LLMProxy, ProxyConfig
from rollart.weightplane.store import WeightStore
from rollart.types import UpdateWeights, WeightBucket
from rollart.messages import GetStats, GetVersion, PublishVersion, PutBucket, WeightAddress

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TURN_TOKENS = 16
GREEDY = dict(temperature=0.0, ignore_eos=True, max_tokens=TURN_TOKENS)


@pytest.fixture(scope="module")
def sharp_model(tmp_path_factory):
    """The tiny model with its final norm scaled up: peaked logits, so greedy tokens never hinge on a near-tie."""
    from safetensors.torch import load_file, save_file

    from rollart.tools.make_tiny_model import make_tiny_model
    path = str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))
    weights = load_file(os.path.join(path, "model.safetensors"))
    weights["model.norm.weight"] = weights["model.norm.weight"] * 8
    save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture
async def system():
    # generous spawn timeout: a worker process imports torch and loads the model, slow on a loaded machine
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=3.0, spawn_timeout=300) as s:
        yield s


async def _spawn(system, model, name, hw_class, max_restarts):
    return await system.spawn(InferenceWorker, dict(model=model, num_kv_blocks=512), name=name, hw_class=hw_class,
                              restart=RestartPolicy(max_restarts=max_restarts, backoff=0.05))


def _reference(model, num_traj, turns):
    """Each trajectory's per-turn outputs, computed by one engine in this process."""
    from rollart.engine import EngineConfig, LLMEngine, SamplingParams
    engine = LLMEngine(EngineConfig(model=model, num_kv_blocks=512))
    expected = {}
    for t in range(num_traj):
        history, outs = _first_prompt(t), []
        for turn in range(turns):
            out = engine.generate([history], SamplingParams(**GREEDY))[0].token_ids
            outs.append(out)
            history = history + out + _observation(turn)
        expected[f"traj{t}"] = outs
    return expected


def _first_prompt(t):
    return [5 + t, 40, 41, 42 + t]


def _observation(turn):
    return [100 + turn, 101, 102]


async def _trajectory(proxy, tid, turns, results, task, last_turn_gate=None):
    """A multi-turn agent: each turn's prompt is the whole history (sticky routing reuses its prefix). With a
    gate, the last turn waits for it, so a test knows that turn is still to come when it opens the gate."""
    history = _first_prompt(int(tid[4:]))
    for turn in range(turns):
        if last_turn_gate is not None and turn == turns - 1:
            await last_turn_gate.wait()
        res = await proxy.generate(tid, history, GREEDY, task=task)
        results.append((tid, turn, res))
        history = history + res.token_ids + _observation(turn)


async def _wait_for(cond, timeout=240.0, poll_s=0.02):
    """Generous timeout: a restart re-imports torch on a loaded machine. poll_s=0 checks on every loop turn, for
    conditions as short-lived as a 16-token turn of the tiny model, which can start and end between 20 ms polls."""
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(poll_s)


async def test_kill9_restarts_in_place_then_reroutes_after_repeated_failures(system, sharp_model):
    from safetensors.torch import load_file
    fast, spare = await asyncio.gather(_spawn(system, sharp_model, "H800-0", "H800", max_restarts=1),
                                       _spawn(system, sharp_model, "H20-0", "H20", max_restarts=0))
    proxy = LLMProxy([("H800-0", "H800", fast), ("H20-0", "H20", spare)],
                     ProxyConfig(hw_affinity={"frozenlake": "H800"}, fallback={"H800": ["H20"]},
                                 max_worker_failures=2, restart_timeout_s=120))
    # version 1 everywhere, from the weight store: a restarted worker must pull it again before serving
    store = WeightStore()
    await store.on_start()
    store.put_bucket(PutBucket(WeightBucket.of(1, load_file(os.path.join(sharp_model, "model.safetensors")))))
    store.publish(PublishVersion(1, 1))
    await proxy.update_weights(UpdateWeights(1, source=await store.weight_address(WeightAddress())))
    assert proxy.health.source and not hasattr(proxy.health, "resync")  # an address, no copy of the weights
    served_before = store.bytes_served()
    num_traj, turns = 4, 3
    results = []
    last_turn = asyncio.Event()  # held until step 2, so the rollout cannot finish before the second kill
    rollout = asyncio.gather(*(_trajectory(proxy, f"traj{t}", turns, results, "frozenlake", last_turn)
                               for t in range(num_traj)))

    # 1) first kill -9, mid-rollout: the runtime restarts the worker in place and its requests are re-issued there
    await _wait_for(lambda: len(results) >= 3 and proxy.workers["H800-0"].outstanding > 0, poll_s=0)
    first_pid = fast.pid
    os.kill(first_pid, signal.SIGKILL)
    await _wait_for(lambda: fast.restarts == 1 and fast.state == "ready" and proxy.workers["H800-0"].healthy
                    and len(results) >= 6)
    assert fast.pid != first_pid and not proxy.workers["H800-0"].dead
    assert await fast.send(GetVersion()) == 1 and store.bytes_served() > served_before  # pulled it itself
    assert proxy.counters["retries"] >= 1 and proxy.counters["rerouted"] == 0
    assert all(res.worker == "H800-0" for _, _, res in results), ([(t, k, r.worker) for t, k, r in results], proxy.stats())

    # 2) second kill -9: restarts exhausted -> removed; in-flight requests finish on the compatible H20 worker
    last_turn.set()
    await _wait_for(lambda: proxy.workers["H800-0"].outstanding > 0, poll_s=0)
    os.kill(fast.pid, signal.SIGKILL)
    await asyncio.wait_for(rollout, 240)
    assert proxy.workers["H800-0"].dead and not fast.alive
    assert proxy.counters["rerouted"] >= 1

    # nothing lost or duplicated: exactly one result per (trajectory, turn), each the full greedy output
    keys = [(tid, turn) for tid, turn, _ in results]
    assert len(keys) == len(set(keys)) == num_traj * turns
    expected = _reference(sharp_model, num_traj, turns)
    for tid, turn, res in results:
        assert res.finish_reason == "length" and res.token_ids == expected[tid][turn], (tid, turn)
        assert res.versions == [1] * TURN_TOKENS  # the restarted worker was re-synced to version 1
    assert results[-1][2].worker == "H20-0"
    served = {res.worker for _, _, res in results}
    assert served == {"H800-0", "H20-0"}
    await store.on_stop()


async def test_cancel_aborts_inside_the_worker_process(system, sharp_model):
    handle = await _spawn(system, sharp_model, "w0", "cpu", max_restarts=0)
    proxy = LLMProxy([("w0", "cpu", handle)])
    task = asyncio.create_task(proxy.generate("t", [5, 6, 7], dict(GREEDY, max_tokens=2000)))
    async with asyncio.timeout(60):
        while (await handle.send(GetStats()))["steps"] < 3:
            await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(30):
        while (await handle.send(GetStats()))["running"]:
            await asyncio.sleep(0.02)
    stats = await handle.send(GetStats())
    assert stats["aborted"] == 1 and stats["finished"] == 0
    res = await proxy.generate("t2", [5, 6], GREEDY)  # and it keeps serving
    assert len(res.token_ids) == TURN_TOKENS
