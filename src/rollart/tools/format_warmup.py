"""Teach a fresh model the answer format of text envs, and nothing of their tasks: supervised steps on
transcripts of random valid actions.

    python -m rollart.tools.format_warmup MODEL_DIR rollart/FrozenLake-v0 --import envs --steps 200 \
        --env-kwargs '{"random_start": true, "spell_position": true, "invalid_hint": false}'

A random-init model spreads its answer over its whole vocabulary (~500 tokens for the tiny model), so nearly
every answer is invalid; on the quickstart the first ~50 RL steps went to learning to answer with a letter at
all, and on some seeds the policy collapsed onto a wrong answer in a few states before it had explored them. A
pretrained LLM arrives knowing the format. This gives the tiny model the same start: it plays episodes of
each task with the env's own ``sample_action(rng)`` (a random answer the rules allow in the current state, e.g.
FrozenLake's moves that do not run into the board's edge, which depend on the observation) and trains
next-token prediction on the answer tokens only, so the model learns a uniform prior over the valid answers of
every state, and no policy: its greedy success afterwards is what such a random mover's would be. Where the valid
answers depend on the state, the model must read the observation to match them; a prior that did not (FrozenLake's
four letters in every cell, until 2026-12-03) taught it to ignore the observation, and RL from there could settle
on an open-loop policy that never reads it (the quickstart's seed 1: the same first move from every start cell,
0.82 after 261 steps).

The transcripts are built exactly as a rollout builds them (rollart.rollout.chat): system prompt, each
observation as a user turn, each answer as the assistant turn, with the stop token as a target when the task's
answer budget leaves room for it. An agent task (rollart.gateway.agent_task) is warmed up on runs of the agent
itself through the gateway, its replies drawn by the task's ``sample_reply`` (rollart.gateway.warmup).
Deterministic given ``seed``; the model is rewritten in place.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import gymnasium as gym
import numpy as np
import torch

from rollart.models import load_model, load_tokenizer, save_model
from rollart.rollout.chat import ChatFormat
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.env_protocol import env_defaults
from rollart.trainer.losses import masked_mean, token_logprobs


class WarmupError(ValueError):
    """A task cannot be warmed up (its env has no ``sample_action``)."""


@dataclass
class WarmupResult:
    steps: int
    seconds: float
    first_loss: float
    last_loss: float
    """Mean next-token loss on the answer tokens of the last step (ln k for a uniform prior over k answers)."""


class _TaskTranscripts:
    """Random-action episodes of one task, tokenized as a rollout would tokenize them."""

    def __init__(self, task: TaskSpec, tokenizer, rng: np.random.Generator):
        self.task = task
        self.env = gym.make(task.env_id, **task.env_kwargs)
        self.base = self.env.unwrapped
        if not callable(getattr(self.base, "sample_action", None)):
            raise WarmupError(f"task {task.name}: format warm-up needs {type(self.base).__name__} to define "
                              "sample_action(rng) returning a valid answer; give it one or set warmup_steps=0")
        system, budget = env_defaults(self.env)
        self.chat = ChatFormat(tokenizer, task.system_prompt if task.system_prompt is not None else system)
        self.budget = task.max_new_tokens or budget or 64
        self.rng = rng

    def episode(self) -> list[tuple[list[int], list[int]]]:
        """Token ids of one episode and its loss mask (1 on the answer tokens the model would generate)."""
        obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
        ids = self.chat.first_prompt(str(obs))
        mask = [0] * len(ids)
        for _ in range(self.task.max_turns):
            action = str(self.base.sample_action(self.rng))
            answer = self.chat.encode(action)[: self.budget]
            if len(answer) < self.budget and self.chat.stop_token_ids:
                answer = answer + [self.chat.stop_token_ids[0]]
            ids += answer
            mask += [1] * len(answer)
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated or len(ids) >= self.task.max_total_tokens:
                break
            following = self.chat.next_turn(str(obs), answer)
            ids += following
            mask += [0] * len(following)
        return [(ids, mask)]

    def close(self) -> None:
        self.env.close()


def _transcripts(task, tokenizer, rng: np.random.Generator):
    """Random-action episodes of an env task, or random-reply runs of an agent task (its ``sample_reply``)."""
    from rollart.gateway.agent_task import AgentTask
    if isinstance(task, AgentTask):
        if task.sample_reply is None:
            raise WarmupError(f"agent task {task.name}: format warm-up needs AgentTask(sample_reply=...) saying what "
                              "a valid reply looks like at each call; give it one or set warmup_steps=0")
        from rollart.gateway.warmup import AgentTranscripts
        return AgentTranscripts(task, tokenizer, rng)
    return _TaskTranscripts(task, tokenizer, rng)


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _batch(rows: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([i + [pad_id] * (width - len(i)) for i, _ in rows])
    mask = torch.tensor([m + [0] * (width - len(m)) for _, m in rows], dtype=torch.float32)
    return ids, mask


def format_warmup(model_dir: str | Path, tasks: Sequence[TaskSpec], steps: int, seed: int = 0,
                  batch_size: int = 8, lr: float = 1e-3, threads: int = 2) -> WarmupResult:
    """``steps`` AdamW steps of ``batch_size`` random-action episodes (tasks in turn) on the model in
    ``model_dir``, which is rewritten; see the module docstring."""
    if steps < 1 or batch_size < 1 or not tasks:
        raise ValueError(f"format_warmup: steps >= 1, batch_size >= 1 and at least one task, got steps={steps}, "
                         f"batch_size={batch_size}, {len(tasks)} tasks")
    tokenizer = load_tokenizer(model_dir)
    pad_id = tokenizer.pad_token_id or 0
    rng = np.random.default_rng(seed)
    sources: list = []
    start = time.perf_counter()
    losses: list[float] = []
    try:
        for task in tasks:
            sources.append(_transcripts(task, tokenizer, rng))
        with _torch_threads(threads), torch.random.fork_rng():
            torch.manual_seed(seed)
            model = load_model(model_dir)
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
            for step in range(steps):
                rows = [row for i in range(batch_size)
                        for row in sources[(step * batch_size + i) % len(sources)].episode()]
                ids, mask = _batch(rows, pad_id)
                loss = -masked_mean(token_logprobs(model(ids), ids), mask)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            model.eval()
            save_model(model, model_dir)
    finally:
        for s in sources:
            s.close()
    return WarmupResult(steps=steps, seconds=time.perf_counter() - start, first_loss=losses[0], last_loss=losses[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", help="HF-format model folder (rewritten in place)")
    p.add_argument("env_id", help="registered gymnasium id of a text env with sample_action(rng)")
    p.add_argument("--import", dest="imports", action="append", default=[], help="module that registers env_id")
    p.add_argument("--env-kwargs", default="{}", help="JSON object of env kwargs")
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=0, help="answer budget (0: the env's)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for module in a.imports:
        importlib.import_module(module)
    task = TaskSpec(name=a.env_id, env_id=a.env_id, env_kwargs=json.loads(a.env_kwargs), max_turns=a.max_turns,
                    max_new_tokens=a.max_new_tokens)
    r = format_warmup(a.model_dir, [task], a.steps, seed=a.seed)
    print(f"format warm-up: {r.steps} steps in {r.seconds:.1f} s, answer loss {r.first_loss:.2f} -> {r.last_loss:.2f}")


if __name__ == "__main__":
    main()
