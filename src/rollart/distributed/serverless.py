"""Client for stateless functions behind an HTTP endpoint (the serverless reward path).

Protocol (the rollart serverless endpoint implements the same)::

    POST {url}/call/{function_name}
    Authorization: Bearer TOKEN            (optional)
    {"args": [...], "kwargs": {...}}
    -> 200 {"ok": true, "result": ...}  |  {"ok": false, "error": "..."}

Connection errors and 5xx responses are retried with exponential backoff; a 4xx or ``ok: false`` is
the function's answer and raises ``ServerlessError`` at once. Arguments must be JSON-able; dataclasses
(e.g. ``Trajectory``), tuples, numpy arrays and tensors are converted with :func:`to_jsonable`.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

log = logging.getLogger("rollart.distributed")


class ServerlessError(RuntimeError):
    """The serverless function failed (its error), or the endpoint stayed unreachable after retries."""


def to_jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays/scalars, torch tensors
        return value.tolist()
    raise TypeError(f"cannot send a {type(value).__name__} to a serverless function: use JSON-able values")


class ServerlessClient:
    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0, retries: int = 4,
                 backoff: float = 0.1):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._session: Any = None

    async def call(self, function: str, args: list | tuple = (), kwargs: dict | None = None) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        body = {"args": to_jsonable(list(args)), "kwargs": to_jsonable(kwargs or {})}
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        target = f"{self.url}/call/{function}"
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                async with self._session.post(target, json=body, headers=headers) as resp:
                    if resp.status >= 500:
                        text = await resp.text()
                        problem = f"HTTP {resp.status}: {text[:200]}"
                        if '"retryable":false' in text.replace(" ", ""):  # the function raised: final
                            raise ServerlessError(f"serverless {function}() failed: {problem}")
                    else:
                        try:
                            data = await resp.json(content_type=None)
                        except ValueError:
                            data = None
                        if resp.status >= 400 or not isinstance(data, dict) or "ok" not in data:
                            raise ServerlessError(f"{target} answered HTTP {resp.status} "
                                                  f"{str(data if data is not None else await resp.text())[:300]}")
                        if not data["ok"]:
                            raise ServerlessError(f"serverless {function}() failed: {data.get('error', '?')}")
                        return data.get("result")
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                problem = f"{type(e).__name__}: {e}"
            if attempt < self.retries:
                log.warning("serverless %s attempt %d failed (%s); retrying in %.2fs", target, attempt + 1,
                            problem, delay)
                await asyncio.sleep(delay)
                delay *= 2
        raise ServerlessError(f"{target} unreachable after {self.retries + 1} attempts: {problem}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ServerlessFunction:
    """``await fn(*args, **kwargs)`` calls one serverless function (set on workers as their attribute)."""

    def __init__(self, url: str, function: str, token: str | None = None):
        self.client = ServerlessClient(url, token)
        self.function = function

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self.client.call(self.function, args, kwargs)

    def __repr__(self) -> str:
        return f"<serverless {self.client.url}/call/{self.function}>"
