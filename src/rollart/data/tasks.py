"""Dataset tasks: a file of prompts with answers as the run's tasks, one per ``data_source`` (multi-task from one
file), each played by the ``rollart/Dataset-v0`` env (registered by ``import envs``) and scored by a verifier.

    tasks = dataset_tasks(DatasetConfig(path="gsm8k.jsonl", verifier="math_verify", heldout=0.1))
    Coordinator(cfg, tasks.train, heldout_tasks=tasks.heldout).run()

Rows are split by rows into training and held-out (``rollart.data.split.split_rows``: disjoint, checked); a task's
training rows are dealt to GRPO groups one per group, every row once per epoch in an order shuffled by the run's
seed (``TaskSpec.rows``: the row index is the group's reset seed). The env reads the same file (env hosts on other
nodes need it at the same path) and finds the same split. Everything wrong with the file or the mapping stops the
run before anything starts, in one line naming the file and the column.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from rollart.config import ConfigError
from rollart.data.split import split_rows
from rollart.data.rows import Columns, Row, read_rows
from rollart.rollout.env_manager import TaskSpec

ENV_ID = "rollart/Dataset-v0"
SPLITS = ("train", "heldout")


@dataclass
class DatasetConfig:
    """A dataset task set (``data.*`` in a recipe; ``data=PATH`` sets ``data.path``)."""
    SHORTHAND: ClassVar[str] = "path"
    path: str = ""
    """A .json / .jsonl / .parquet file, or a folder written by Dataset.save_to_disk (local files only)."""
    columns: Columns = field(default_factory=Columns)
    """Which columns hold the prompt, the answer and the task name ("" = recognise the layout)."""
    heldout: float = 0.1
    """Rows held out for evaluation: a fraction in [0, 1), or a whole number of rows; 0: none."""
    split_seed: int = 0
    """Seeds which rows are held out (the same in every process)."""
    system_prompt: str | None = None
    """System prompt of every row; None: the rows' own system message (chat prompts), else none."""
    verifier: str = "math_verify"
    """How an answer is scored: a verifier of rollart.rewards.verifiers (math_verify, exact_match, regex_match,
    numeric, code_tests) or a 'module:function'."""
    format_weight: float = 0.0
    """Weight of a format bonus (the answer in \\boxed{}) added to the verifier's score."""
    tools: bool = False
    """Multi-turn: the model may call a calculator (<calc>expression</calc>) before it answers."""
    max_new_tokens: int = 256
    """Token budget of each answer."""
    max_turns: int = 4
    """Turns when tools is on (one answer without tools)."""
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.max_turns < 1:
            raise ConfigError("data.max_new_tokens and data.max_turns must be >= 1")
        if self.format_weight < 0:
            raise ConfigError(f"data.format_weight={self.format_weight} must be >= 0")


class DatasetTasks(NamedTuple):
    train: list[TaskSpec]
    heldout: list[TaskSpec]
    """One per task with held-out rows (empty when heldout=0), of the same names as the training tasks."""


def split_of(path: str, columns: Columns, source: str, split: str, heldout: float, split_seed: int) -> list[Row]:
    """The rows of one task (``source``) in one split: what the coordinator deals and what the env serves."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: choose one of {SPLITS}")
    rows = read_rows(path, columns)
    train, held = split_rows(len(rows), heldout, split_seed)
    return [rows[i] for i in (train if split == "train" else held) if rows[i].source == source]


def dataset_tasks(cfg: DatasetConfig) -> DatasetTasks:
    """The training and held-out tasks of ``cfg``'s file (reads it: one-line errors before anything starts)."""
    if not cfg.path:
        raise ConfigError("data.path is empty: give a .json, .jsonl or .parquet file of prompts with answers")
    rows = read_rows(cfg.path, cfg.columns)
    from rollart.rewards.verifiers import verifier_of
    try:
        verifier_of(cfg.verifier)  # an unknown name or a bad 'module:function' stops here, in one line
    except (ValueError, ImportError) as e:
        raise ConfigError(f"data.verifier: {e}") from None
    sources = list(dict.fromkeys(r.source for r in rows))
    train, held = [], []
    for source in sources:
        kwargs = dict(path=cfg.path, columns=dataclasses.asdict(cfg.columns), source=source,
                      heldout=cfg.heldout, split_seed=cfg.split_seed, verifier=cfg.verifier,
                      format_weight=cfg.format_weight, tools=cfg.tools)
        for split, out in (("train", train), ("heldout", held)):
            mine = split_of(cfg.path, cfg.columns, source, split, cfg.heldout, cfg.split_seed)
            if not mine:
                if split == "train":
                    raise ConfigError(f"data={cfg.path!r}: task {source!r} has no training rows (all held out); "
                                      "lower data.heldout")
                continue
            out.append(TaskSpec(
                name=source, env_id=ENV_ID,
                env_kwargs={**kwargs, "split": split}, system_prompt=_system(cfg, source, mine),
                max_new_tokens=cfg.max_new_tokens, max_turns=cfg.max_turns if cfg.tools else 1,
                temperature=cfg.temperature, weight=float(len(mine)), rows=len(mine)))
    return DatasetTasks(train, held)


def _system(cfg: DatasetConfig, source: str, rows: list[Row]) -> str | None:
    if cfg.system_prompt is not None:
        return cfg.system_prompt
    systems = {r.system for r in rows}
    if len(systems) > 1:
        raise ConfigError(f"data={cfg.path!r}: the rows of task {source!r} carry {len(systems)} different system "
                          "messages; a task has one system prompt: set data.system_prompt=TEXT")
    return systems.pop() or None
