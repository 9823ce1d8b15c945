"""Async client of the serverless reward endpoint, with retries and exponential backoff.

    client = RewardClient("http://127.0.0.1:8700", token="SECRET")
    score = await client.call("math_reward", text, reference)

Failures that a retry can fix (HTTP 5xx, 429, connection errors, timeouts) are retried with
exponentially growing, jittered delays; bad requests (other 4xx) and errors the reward function
itself raised (a 5xx answer with ``"retryable": false``: deterministic) fail at once. When retries run out
the error names the function, the attempts and the last reason — a call never fails silently.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any, Optional

import aiohttp

from rollart.config import ConfigError


class RewardCallError(RuntimeError):
    """A reward call failed for good; ``status`` is the last HTTP status (None: no response)."""

    def __init__(self, message: str, status: Optional[int] = None, retryable: bool = True):
        super().__init__(message)
        self.status, self.retryable = status, retryable


@dataclasses.dataclass
class ClientConfig:
    """Retry and timeout settings of a reward client."""

    retries: int = 4
    """Extra attempts after the first for retryable failures."""
    backoff: float = 0.1
    """First retry delay in seconds; doubled on each further retry (with jitter)."""
    max_backoff: float = 5.0
    """Upper bound on one retry delay."""
    timeout: float = 60.0
    """Total seconds one attempt may take (connect + call); in a run, reward.attempt_timeout_s. An endpoint that
    accepts the connection and never answers fails the attempt after this long."""

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries}")
        if self.backoff < 0 or self.max_backoff < self.backoff:
            raise ConfigError("need 0 <= backoff <= max_backoff")
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {self.timeout}")


class RewardClient:
    """One aiohttp session to ``url``; use ``async with`` or call :meth:`close`."""

    def __init__(self, url: str, token: Optional[str] = None, config: Optional[ClientConfig] = None,
                 seed: Optional[int] = None):
        self.url = url.rstrip("/")
        self.token, self.cfg = token, config or ClientConfig()
        self._session: Optional[aiohttp.ClientSession] = None
        self._rng = random.Random(seed)
        self.attempts = 0

    async def __aenter__(self) -> "RewardClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stats(self) -> dict:
        """The endpoint's ``GET /stats`` (calls, workers alive and spawned, utilisation); one attempt."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.cfg.timeout))
        try:
            async with self._session.get(f"{self.url}/stats", headers=self._headers()) as resp:
                if resp.status != 200:
                    raise RewardCallError(f"GET /stats: HTTP {resp.status}", resp.status)
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, ValueError) as e:
            raise RewardCallError(f"GET /stats: {type(e).__name__}: {e}") from None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` on the endpoint and return its JSON result."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.cfg.timeout))
        body = {"args": list(args), "kwargs": kwargs}
        last: Optional[RewardCallError] = None
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                delay = min(self.cfg.max_backoff, self.cfg.backoff * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + self._rng.random()))
            self.attempts += 1
            try:
                return await self._attempt(function, body)
            except RewardCallError as e:
                if not e.retryable:
                    raise
                last = e
        raise RewardCallError(f"reward call {function!r} to the reward endpoint at {self.url} failed after "
                              f"{self.cfg.retries + 1} attempts; last error: {last}",
                              status=last.status if last else None, retryable=False)

    async def _attempt(self, function: str, body: dict) -> Any:
        try:
            async with self._session.post(f"{self.url}/call/{function}", json=body,
                                          headers=self._headers()) as resp:
                status = resp.status
                try:
                    reply = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    reply = {"ok": False, "error": f"non-JSON answer (HTTP {status})"}
        except asyncio.TimeoutError:
            raise RewardCallError(f"no answer for {self.cfg.timeout:g} s (reward.attempt_timeout_s)", None,
                                  retryable=True) from None
        except (aiohttp.ClientError, ConnectionError) as e:
            raise RewardCallError(f"{type(e).__name__}: {e}", None, retryable=True) from None
        if status == 200 and isinstance(reply, dict) and reply.get("ok"):
            return reply.get("result")
        error = reply.get("error", "") if isinstance(reply, dict) else str(reply)
        retryable = status >= 500 or status == 429
        if isinstance(reply, dict) and reply.get("retryable") is False:
            retryable = False  # the function raised: the same call would fail again
        raise RewardCallError(f"HTTP {status}: {error}", status, retryable)
