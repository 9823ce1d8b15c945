"""Gateway: the OpenAI-compatible HTTP server (aiohttp) on the run's LLMProxy.

    gw = Gateway(proxy, tokenizer); await gw.start()
    session = gw.open("traj-0")                       # one API key per trajectory
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=session.api_key)

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (``stream`` true or false, ``logprobs``),
``GET /v1/models``. Tools go through the chat template as described in :mod:`rollart.gateway.tool_format`;
``tool_choice`` may force a tool that takes no arguments ("required" with one tool, or the tool named): the gateway
answers that call itself, and it is trained on as context only.
The key is read from ``X-Rollart-Trajectory``, ``Authorization: Bearer``, or the body's ``user`` field (the
first one the gateway knows); an unknown key gets 401 with one line. Every response also carries a
``rollart`` object: the call's prompt and completion token ids, per-token policy versions and its segment.

Streaming sends Server-Sent Events in the OpenAI chunk format once the generation has finished (the proxy
returns whole generations), one chunk per token. ``top_logprobs`` is refused: the engine records the sampled
token's logprob only. The gateway also listens on a unix socket when ``unix_socket`` is true (in a fresh
private folder, removed on close; ``unix_path``): how a sandboxed agent reaches it (rollart.gateway.sandboxed).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web

from rollart.gateway.prompt import completion_prompt_ids
from rollart.gateway.session import AgentSession, CallGuard, CallRefused
from rollart.gateway.tool_format import ToolFormatError, ToolSyntax, forced_tool, message_text, parse_calls
from rollart.rollout.chat import ChatFormat
from rollart.types import InvalidRequestError, SamplingParams

log = logging.getLogger("rollart.gateway")
ENDED_KEYS = 65536


class Gateway:
    """See module docstring."""

    def __init__(self, proxy: Any, tokenizer: Any, model_name: str = "rollart-policy", host: str = "127.0.0.1",
                 port: int = 0, unix_socket: bool = False) -> None:
        self.proxy, self.tokenizer, self.model_name = proxy, tokenizer, model_name
        self.host, self.port = host, port
        self.unix_path: str | None = None
        if unix_socket:  # a short path (unix socket paths are limited to ~107 bytes) only this user can enter
            self.unix_path = os.path.join(tempfile.mkdtemp(prefix="rollart-gw-"), "gateway.sock")
        self.sessions: dict[str, AgentSession] = {}
        """API key -> open session."""
        self._formats: dict[str, ChatFormat] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        """Keys of recently ended trajectories (for a clearer 401), the last ENDED_KEYS only."""
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> "Gateway":
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        # handler_cancellation: an agent that disconnects (killed, cancelled) aborts its generation
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = next(a[1] for a in self._runner.addresses if isinstance(a, tuple))
        if self.unix_path:
            await web.UnixSite(self._runner, self.unix_path).start()
            # a sandbox's own uid connects through a bind mount of the socket: it needs write on the socket and
            # search on its folder (which it cannot list); only a trajectory's API key gets anything through it
            os.chmod(self.unix_path, 0o666)
            os.chmod(os.path.dirname(self.unix_path), 0o711)
        log.info("agent gateway listening on %s%s", self.base_url,
                 f" and {self.unix_path}" if self.unix_path else "")
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.unix_path:
            shutil.rmtree(os.path.dirname(self.unix_path), ignore_errors=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ------------------------------------------------------------------ trajectories
    def open(self, trajectory_id: str, task: str = "default", group_id: str = "", system_prompt: str = "",
             sampling: SamplingParams | None = None, seed: int | None = None,
             guard: CallGuard | None = None, tool_syntax: ToolSyntax = ToolSyntax()) -> AgentSession:
        """A new trajectory with its own API key (``tool_syntax``: how its model writes tool calls)."""
        if system_prompt not in self._formats:
            self._formats[system_prompt] = ChatFormat(self.tokenizer, system_prompt)
        session = AgentSession(trajectory_id, self._formats[system_prompt], task, group_id, sampling, seed, guard,
                               tool_syntax)
        self.sessions[session.api_key] = session
        return session

    def end(self, session: AgentSession, reason: str = "done") -> None:
        """Refuse the trajectory's key from now on."""
        session.ended = session.ended or reason
        if self.sessions.pop(session.api_key, None) is not None:
            self._ended[session.api_key] = None
            if len(self._ended) > ENDED_KEYS:
                self._ended.popitem(last=False)

    def session_of(self, request: web.Request, body: dict) -> AgentSession:
        auth = request.headers.get("Authorization", "")
        keys = [request.headers.get("X-Rollart-Trajectory"),
                auth[7:].strip() if auth.lower().startswith("bearer ") else None, body.get("user")]
        for key in keys:
            if key and key in self.sessions:
                return self.sessions[key]
        if any(key in self._ended for key in keys if key):
            raise CallRefused(401, "this API key belongs to a trajectory that has ended; stop calling",
                              "authentication_error")
        raise CallRefused(401, "unknown API key: each trajectory has its own key (pass it as Authorization: "
                               "Bearer KEY, X-Rollart-Trajectory: KEY or user=KEY)", "authentication_error")

    # ------------------------------------------------------------------ handlers
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                              "owned_by": "rollart"}]})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._completion)

    async def _serve(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise CallRefused(400, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise CallRefused(400, "the request body must be a JSON object")
            session = self.session_of(request, body)
            if body.get("n", 1) != 1:
                raise CallRefused(400, "n must be 1: one trajectory samples one completion per call")
            if body.get("top_logprobs") or (isinstance(body.get("logprobs"), int)
                                            and not isinstance(body.get("logprobs"), bool) and body["logprobs"] > 1):
                raise CallRefused(400, "top_logprobs is not supported: the engine records the sampled token's "
                                       "logprob only (ask logprobs=true / logprobs=1)")
            async with session.lock:
                result = await handler(session, body)
        except CallRefused as e:
            return _error(e.status, e.message, e.kind)
        except (ToolFormatError, InvalidRequestError, ValueError, TypeError) as e:
            return _error(400, str(e))
        if body.get("stream"):
            return await self._stream(request, result, body)
        return web.json_response(result)

    async def _chat(self, session: AgentSession, body: dict) -> dict:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise CallRefused(400, "messages must be a non-empty list")
        tools = body.get("tools") or []
        if body.get("tool_choice") == "none":
            tools = []
        forced = forced_tool(body.get("tool_choice"), tools)
        if forced is not None:
            return self._forced_call(session, forced)
        msgs = session.prompter.messages(messages, tools)
        prompt = session.prompter.prompt_ids(msgs)
        params = session.params(body, session.chat.stop_token_ids)
        call, out = await session.generate(self.proxy, prompt, params)
        content, calls = parse_calls(session.chat.action_text(out.token_ids), tools, session.tool_syntax)
        message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
        if calls:
            message["tool_calls"] = [{"id": f"call_{len(session.calls)}_{i}", "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments}}
                                     for i, c in enumerate(calls)]
        session.prompter.remember(msgs, message_text(message, len(messages), session.tool_syntax), prompt,
                                  out.token_ids)
        finish = "tool_calls" if calls else _finish(out.finish_reason)
        choice = {"index": 0, "message": message, "finish_reason": finish,
                  "logprobs": {"content": self._token_logprobs(call)} if body.get("logprobs") else None}
        return self._response(session, call, "chat.completion", choice)

    async def _completion(self, session: AgentSession, body: dict) -> dict:
        if body.get("echo"):
            raise CallRefused(400, "echo is not supported")
        prompt = completion_prompt_ids(self.tokenizer, body.get("prompt"), session.prev_text, session.prev_ids)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        call, out = await session.generate(self.proxy, prompt, session.params(body, [eos] if eos is not None else []))
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        prompt_text = body["prompt"] if isinstance(body["prompt"], str) else None
        session.prev_text = None if prompt_text is None else prompt_text + text
        session.prev_ids = list(prompt) + list(out.token_ids)
        logprobs = None
        if body.get("logprobs") is not None and body.get("logprobs") is not False:
            pieces = [self.tokenizer.decode([t]) for t in call.completion_ids]
            offsets = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
            logprobs = {"tokens": pieces, "token_logprobs": call.logprobs, "top_logprobs": None,
                        "text_offset": offsets}
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": _finish(out.finish_reason)}
        return self._response(session, call, "text_completion", choice)

    def _forced_call(self, session: AgentSession, name: str) -> dict:
        """The answer to a call whose ``tool_choice`` forces a tool without arguments: the assistant's call is fully
        determined, so the gateway writes it and the model samples nothing. Nothing is recorded: the call reaches
        the trajectory as text of the next prompt (loss mask 0), never as tokens the model chose."""
        if session.ended is not None:
            raise CallRefused(409, f"trajectory {session.trajectory_id} has ended ({session.ended}); stop calling")
        session.forced_calls += 1
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": f"call_forced_{session.forced_calls}", "type": "function",
                                   "function": {"name": name, "arguments": "{}"}}]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls", "logprobs": None}
        return {"id": f"chatcmpl-{session.trajectory_id}-forced-{session.forced_calls}", "object": "chat.completion",
                "created": int(time.time()), "model": self.model_name, "choices": [choice],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                "rollart": {"prompt_token_ids": [], "completion_token_ids": [], "policy_versions": [],
                            "segment": None, "forced": True}}

    def _response(self, session: AgentSession, call, kind: str, choice: dict) -> dict:
        n_prompt, n_out = len(call.prompt_ids), len(call.completion_ids)
        return {"id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{session.trajectory_id}-"
                      f"{len(session.calls)}", "object": kind, "created": int(time.time()),
                "model": self.model_name, "choices": [choice],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
                "rollart": {"prompt_token_ids": call.prompt_ids, "completion_token_ids": call.completion_ids,
                            "policy_versions": call.versions, "segment": call.segment}}

    def _token_logprobs(self, call) -> list[dict]:
        out = []
        for tok, lp in zip(call.completion_ids, call.logprobs):
            text = self.tokenizer.decode([tok])
            out.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
        return out

    async def _stream(self, request: web.Request, result: dict, body: dict) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for chunk in _chunks(result, self.tokenizer, bool(body.get("logprobs"))):
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {k: result[k] for k in ("id", "created", "model", "usage")}
            tail.update(object=_chunk_kind(result), choices=[])
            await resp.write(f"data: {json.dumps(tail)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _chunk_kind(result: dict) -> str:
    return "chat.completion.chunk" if result["object"] == "chat.completion" else "text_completion"


def _chunks(result: dict, tokenizer: Any, logprobs: bool):
    """The whole response as OpenAI stream chunks: one per completion token (text deltas decoded
    incrementally), the tool calls in one chunk, then the finish reason."""
    head = {k: result[k] for k in ("id", "created", "model")}
    head["object"] = _chunk_kind(result)
    choice = result["choices"][0]
    ids = result["rollart"]["completion_token_ids"]
    chat = result["object"] == "chat.completion"
    if chat:
        message = choice["message"]
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}]}
        if message.get("tool_calls"):
            if message["content"]:
                yield {**head, "choices": [{"index": 0, "delta": {"content": message["content"]},
                                            "logprobs": None, "finish_reason": None}]}
            calls = [dict(c, index=i) for i, c in enumerate(message["tool_calls"])]
            yield {**head, "choices": [{"index": 0, "delta": {"tool_calls": calls}, "logprobs": None,
                                        "finish_reason": None}]}
            yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": choice["finish_reason"]}]}
            return
    lps = (choice["logprobs"] or {}).get("content") if chat else (choice["logprobs"] or {}).get("token_logprobs")
    text = message["content"] if chat else choice["text"]
    raw = tokenizer.decode(ids, skip_special_tokens=True)
    start = raw.find(text) if text else 0  # the chat content is the decoded output, stripped
    start, end, done = max(start, 0), max(start, 0) + len(text), 0
    for i in range(len(ids)):
        upto = len(tokenizer.decode(ids[:i + 1], skip_special_tokens=True))
        if not raw.startswith(tokenizer.decode(ids[:i + 1], skip_special_tokens=True)):
            upto = done  # a partial UTF-8 character: its text comes with a later token
        piece = text[max(done, start) - start:max(min(upto, end), start) - start] if upto > done else ""
        done = max(done, upto)
        lp = None
        if logprobs and lps is not None:
            lp = {"content": [lps[i]]} if chat else {"tokens": [choice["logprobs"]["tokens"][i]],
                                                     "token_logprobs": [lps[i]], "top_logprobs": None,
                                                     "text_offset": [choice["logprobs"]["text_offset"][i]]}
        delta = {"delta": {"content": piece}} if chat else {"text": piece}
        yield {**head, "choices": [{"index": 0, **delta, "logprobs": lp, "finish_reason": None}]}
    final = {"delta": {}} if chat else {"text": ""}
    yield {**head, "choices": [{"index": 0, **final, "logprobs": None, "finish_reason": choice["finish_reason"]}]}


def _finish(reason: str) -> str:
    return "length" if reason == "length" else "stop"


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    # x-should-retry: the OpenAI client would otherwise retry 409/429 (a refusal here is final)
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status,
                             headers={"x-should-retry": "false"})
