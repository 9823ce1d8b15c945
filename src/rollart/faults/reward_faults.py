"""The reward-endpoint faults: a short real run scores through the real serverless endpoint
(``python -m rollart.rewards.serve``) whose own injector faults a share of its calls (raise, crash the worker, hang
past the call timeout); the client retries. What counts is what was trained without the endpoint's score."""
from __future__ import annotations

import asyncio
import socket
import sys
import time

from rollart.faults.figures import Figure, ended, failed, not_available
from rollart.faults.harness import Harness
from rollart.faults.rewards import ScoreBook

REWARD_FAULT_RATE = 0.30
"""Share of reward-endpoint calls given a fault (the endpoint's own injector: raise, crash or hang)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



async def reward_faults(h: Harness) -> list[Figure]:
    """Rewards through the real serverless endpoint (``python -m rollart.rewards.serve``) with 30% of its
    calls faulted (raise / crash the worker / hang past the call timeout); the client retries. Unscored:
    trained trajectories without the endpoint's score, plus accepted ones lost."""
    import aiohttp

    from rollart.rewards.client import ClientConfig, RewardClient

    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rollart.rewards.serve", "--port", str(port), "--fault-rate", str(REWARD_FAULT_RATE),
        "--fault-seed", "0", "--call-timeout", "2", "--max-workers", "2", "--idle-timeout", "10",
        "--functions", "rollart.faults.rewards:episode_reward", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        try:
            banner = await asyncio.wait_for(server.stdout.readline(), 120)
        except TimeoutError:
            banner = b""
        if b"reward endpoint on" not in banner:
            return [failed("reward_faults_unscored", "the reward endpoint did not start",
                           f"python -m rollart.rewards.serve printed {banner[:200]!r}", time.monotonic() - started)]
        async with aiohttp.ClientSession() as http:  # the socket binds just after the banner
            for _ in range(100):
                try:
                    async with http.get(f"{url}/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        client = RewardClient(url, config=ClientConfig(retries=4, backoff=0.05, max_backoff=1.0, timeout=30.0),
                              seed=0)
        book = ScoreBook(client)
        try:
            out = await h.drive(h.config("reward_faults"), scores=book)
        finally:
            await client.close()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/stats") as r:
                stats = await r.json()
    finally:
        if server.returncode is None:
            server.terminate()
            try:
                await asyncio.wait_for(server.wait(), 30)
            except TimeoutError:
                server.kill()
                await server.wait()
    what = (f"{REWARD_FAULT_RATE:.0%} of endpoint calls faulted: {stats.get('failed', 0)} of {stats.get('calls', 0)} "
            f"calls failed, {stats.get('spawned', 0)} worker processes started; client attempts {client.attempts} "
            f"for {len(book.scores)} scores; {book.failures} trajectories failed after every retry (dropped with the "
            f"reason)")
    if not out.completed:
        return [failed("reward_faults_unscored", ended(out), f"{what}; {ended(out)}", out.seconds)]
    if not stats.get("failed"):
        return [not_available("reward_faults_unscored", f"no endpoint call failed; {what}", out.seconds)]
    a = out.accounts
    value = a.unscored + a.lost
    return [Figure("reward_faults_unscored", str(value), value == 0 and not a.overcounted,
                   f"{what}; trained without the endpoint's score {a.unscored} + lost {a.lost}; {a.describe()}",
                   out.seconds, {"unscored": a.unscored, "lost": a.lost, "endpoint": stats})]
