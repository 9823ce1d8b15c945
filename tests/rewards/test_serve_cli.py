"""`python -m rollart.rewards.serve` as a real process: CLI flags, bad flags, auth and a real call."""
import asyncio
import socket
import subprocess
import sys
import time

from rollart.rewards.client import RewardCallError, RewardClient

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_cli_serves_math_reward_with_token():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rollart.rewards.serve", "--port", str(port),
                             "--token", "tkn", "--max-workers", "2", "--idle-timeout", "1",
                             "--call-timeout", "20", "--functions", "rollart.rewards.rules:math_reward"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "reward endpoint on" in proc.stdout.readline()
        async with RewardClient(f"http://127.0.0.1:{port}", token="tkn") as client:
            deadline = time.monotonic() + 60
            while True:  # the socket binds just after the banner
                try:
                    assert await client.call("math_reward", "Answer: 7", "7") == 1.0
                    break
                except RewardCallError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    await asyncio.sleep(0.2)
        async with RewardClient(f"http://127.0.0.1:{port}", token="wrong") as bad:
            with pytest.raises(RewardCallError, match="HTTP 401"):
                await bad.call("math_reward", "Answer: 7", "7")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_rejects_bad_settings_with_a_clear_message():
    out = subprocess.run([sys.executable, "-m", "rollart.rewards.serve", "--functions", "nosuchmod:f"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "cannot import module 'nosuchmod'" in out.stderr
    out = subprocess.run([sys.executable, "-m", "rollart.rewards.serve", "--functions",
                          "rollart.rewards.rules:math_reward", "--fault-rate", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "fault_rate must be within [0, 1]" in out.stderr
