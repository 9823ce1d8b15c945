"""Serverless reward endpoint over a real aiohttp server and worker processes: protocol, errors, faults, scale-to-zero."""
import asyncio
import json
import os
import random
from pathlib import Path

import aiohttp
import pytest

from rollart.rewards.client import ClientConfig, RewardCallError, RewardClient
from rollart.rewards.rules import math_reward
from rollart.rewards.serve import RewardEndpoint, ServeConfig
from aiohttp import web

from . import funcs

# the helper module's name depends on how pytest put tests/ on sys.path; workers get the same path
HELPERS = funcs.__name__
FUNCS = ("rollart.rewards.rules:math_reward", "rollart.rewards.verifiers:exact_match",
         f"{HELPERS}:slow", f"{HELPERS}:boom", f"{HELPERS}:unserialisable")


@pytest.fixture(autouse=True)
def worker_import_path(monkeypatch):
    top = Path(funcs.__file__).resolve().parents[HELPERS.count(".")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(top), os.environ.get("PYTHONPATH")])))


async def start(**overrides):
    cfg = ServeConfig(functions=FUNCS, port=0, **overrides)
    endpoint = RewardEndpoint(cfg)
    runner = web.AppRunner(endpoint.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return endpoint, runner, f"http://127.0.0.1:{port}"


def samples(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ref = rng.randint(-50, 50)
        guess = ref if rng.random() < 0.5 else ref + rng.randint(1, 3)
        style = rng.choice(["\\boxed{%s}", "Answer: %s", "I think %s", "answer = %s."])
        out.append((f"Let me work it out. {style % guess}", str(ref)))
    return out


async def test_serverless_scores_equal_local_scores():
    endpoint, runner, url = await start(token="s3cret")
    try:
        async with RewardClient(url, token="s3cret") as client:
            data = samples(40)
            remote = await asyncio.gather(*(client.call("math_reward", t, r) for t, r in data))
            local = [math_reward(t, r) for t, r in data]
            assert remote == local
            assert 0 < sum(local) < len(local)  # both outcomes present
            assert await client.call("exact_match", text=" Hi  There", reference="hi there") == 1.0
    finally:
        await runner.cleanup()


async def test_malformed_requests_get_clear_4xx():
    endpoint, runner, url = await start(token="tok", max_request_bytes=4096)
    hdr = {"Authorization": "Bearer tok"}
    try:
        async with aiohttp.ClientSession() as s:
            async def post(path, data, headers=hdr):
                async with s.post(url + path, data=data, headers=headers) as r:
                    return r.status, await r.json()

            assert (await post("/call/math_reward", b"{}", headers={}))[0] == 401
            assert (await post("/call/math_reward", b"{}", headers={"Authorization": "Bearer x"}))[0] == 401
            status, body = await post("/call/math_rewrd", b"{}")
            assert status == 404 and "did you mean" in body["error"] and "math_reward" in body["error"]
            status, body = await post("/call/math_reward", b"{not json")
            assert status == 400 and "not JSON" in body["error"]
            assert (await post("/call/math_reward", b"[1, 2]"))[0] == 400
            assert (await post("/call/math_reward", json.dumps({"args": "x"}).encode()))[0] == 400
            assert (await post("/call/math_reward", json.dumps({"args": [], "extra": 1}).encode()))[0] == 400
            status, body = await post("/call/math_reward", json.dumps({"args": ["x" * 8000]}).encode())
            assert status == 413 and "max_request_bytes" in body["error"]
            status, body = await post("/call/math_reward", json.dumps({"args": [1]}).encode())
            assert status == 500 and body["ok"] is False and "math_reward" in body["error"]  # wrong arity
            status, body = await post("/call/boom", json.dumps({"args": []}).encode())
            assert status == 500 and "ValueError: boom" in body["error"]
            status, body = await post("/call/unserialisable", json.dumps({}).encode())
            assert status == 500 and "not JSON serializable" in body["error"]
            # after all that the endpoint still answers
            status, body = await post("/call/math_reward",
                                      json.dumps({"args": ["\\boxed{4}", "4"]}).encode())
            assert (status, body) == (200, {"ok": True, "result": 1.0})
    finally:
        await runner.cleanup()


async def test_client_does_not_retry_bad_requests():
    endpoint, runner, url = await start()
    try:
        async with RewardClient(url, config=ClientConfig(retries=3, backoff=0.01)) as client:
            with pytest.raises(RewardCallError, match="HTTP 404.*did you mean") as info:
                await client.call("math_rewar", "x", "1")
            assert info.value.status == 404 and client.attempts == 1
    finally:
        await runner.cleanup()


async def test_timeout_kills_worker_and_fails_with_reason():
    endpoint, runner, url = await start(call_timeout=5.0)
    try:
        async with RewardClient(url, config=ClientConfig(retries=0)) as client:
            with pytest.raises(RewardCallError, match="HTTP 504.*timed out after 5.0s"):
                await client.call("slow", 120)
            assert await client.call("slow", 0) == "done"  # a fresh worker took over
    finally:
        await runner.cleanup()


async def test_thirty_percent_faults_every_request_answered_or_failed_with_reason():
    endpoint, runner, url = await start(fault_rate=0.3, fault_seed=1, call_timeout=3.0, max_workers=4)
    data = samples(60, seed=3)
    try:
        async with RewardClient(url, config=ClientConfig(retries=6, backoff=0.01, max_backoff=0.05),
                                seed=0) as client:
            async def one(t, r):
                try:
                    return ("ok", await client.call("math_reward", t, r))
                except RewardCallError as e:
                    return ("failed", str(e))

            results = await asyncio.gather(*(one(t, r) for t, r in data))
        for (status, value), (t, r) in zip(results, data):
            if status == "ok":
                assert value == math_reward(t, r)
            else:
                assert "last error: HTTP 5" in value  # failed with a reason
        counts = endpoint.counts
        assert counts["failed"] > 5  # faults really happened (crash, raise, hang)
        assert sum(s == "ok" for s, _ in results) >= 55  # retries recover nearly all
        assert counts["calls"] == counts["ok"] + counts["failed"] + counts["rejected"]
    finally:
        await runner.cleanup()


async def test_pool_grows_with_queue_and_shrinks_to_zero():
    endpoint, runner, url = await start(max_workers=3, idle_timeout=0.3)
    try:
        async with RewardClient(url) as client:
            assert endpoint.pool.workers == 0
            out = await asyncio.gather(*(client.call("slow", 0.2) for _ in range(6)))
            assert out == ["done"] * 6
            assert 1 < endpoint.pool.spawned <= 3  # grew with the queue of 6, never past the cap
            for _ in range(100):
                if endpoint.pool.workers == 0:
                    break
                await asyncio.sleep(0.05)
            assert endpoint.pool.workers == 0
            async with aiohttp.ClientSession() as s, s.get(url + "/stats") as r:
                stats = await r.json()
            assert 0 < stats["utilisation"] <= 1 and stats["ok"] == 6
    finally:
        await runner.cleanup()


async def test_function_error_is_not_retried_but_worker_crash_is():
    endpoint, runner, url = await start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/call/boom", json={"args": [], "kwargs": {}}) as resp:
                body = await resp.json()
            assert resp.status == 500 and body["ok"] is False and body["retryable"] is False
            assert "ValueError: boom" in body["error"]
        async with RewardClient(url, config=ClientConfig(retries=3, backoff=0.01)) as client:
            with pytest.raises(RewardCallError, match="HTTP 500.*ValueError: boom") as info:
                await client.call("boom")
            assert client.attempts == 1 and info.value.retryable is False  # deterministic: no retries
    finally:
        await runner.cleanup()
    # a crashing worker (injected fault on every call) is retryable: the client uses all its attempts
    endpoint, runner, url = await start(fault_rate=1.0, fault_seed=0, call_timeout=3.0)
    endpoint.rng.choice = lambda options: "crash"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/call/math_reward", json={"args": ["1", "1"], "kwargs": {}}) as resp:
                body = await resp.json()
            assert resp.status == 500 and body["retryable"] is True and "died" in body["error"]
        async with RewardClient(url, config=ClientConfig(retries=2, backoff=0.01)) as client:
            with pytest.raises(RewardCallError, match="after 3 attempts.*died"):
                await client.call("math_reward", "1", "1")
            assert client.attempts == 3
    finally:
        await runner.cleanup()
