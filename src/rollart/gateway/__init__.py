"""Agent gateway: an OpenAI-compatible HTTP server on the LLMProxy that records every call token-in/token-out,
so an existing agent (OpenAI client or CLI harness) trains as a trajectory (``AgentTask``).

``server`` (Gateway), ``session`` (AgentSession: one trajectory's key, prompts and calls), ``prompt`` (chat to
token ids, reusing earlier calls' ids), ``record`` (TrajectoryRecord: calls and trained segments), ``tool_format``
(how tool calls look to the model and are parsed back), ``agent_task`` (AgentTask, start_gateway), ``sandboxed``
(a CLI agent run inside the sandbox, reaching the gateway through ``forward``), ``warmup`` (format warm-up
transcripts through the real gateway)."""
