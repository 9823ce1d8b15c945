"""A user's file of prompts with answers, read into rows: the columns mapped, the common layouts recognised.

Files are read by Hugging Face ``datasets`` from local paths only: ``.json`` / ``.jsonl``, ``.parquet``, or a
folder written by ``Dataset.save_to_disk`` (a ``DatasetDict`` folder: its ``train`` split). Each row becomes a
:class:`Row`: the prompt (a string, or chat ``messages`` whose last user message is the prompt and whose system
message, if any, is the row's system prompt), the reference answer, the task it belongs to (``data_source``)
and every other column (``extra``: what a verifier may need, e.g. a code row's tests).

Without a mapping the common layouts work as they are:

    {"prompt": "...", "answer": "..."}                               prompt + answer (``question`` / ``problem``
                                                                     and ``solution`` / ``ground_truth`` too)
    verl's parquet: prompt = [{"role": "user", ...}], reward_model = {"ground_truth": ...}, data_source
    raw GSM8K: question, answer = "<reasoning> #### 72"              the reference is what follows ``####``

A mapping (``Columns``) names other columns; a dotted name reaches into a struct column (``reward_model.
ground_truth``). A missing column, an unreadable file or an empty file is a ``ConfigError`` of one line naming
the file and the column.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollart.config import ConfigError

PROMPTS = ("prompt", "question", "problem", "messages")
ANSWERS = ("answer", "reward_model.ground_truth", "solution", "ground_truth")
SOURCE = "data_source"
GSM8K_MARK = "####"


@dataclass(frozen=True)
class Columns:
    """Which columns hold what ("" = recognise the layout; see the module docstring)."""
    prompt: str = ""
    """A prompt string or chat messages."""
    answer: str = ""
    """The reference answer (ground truth); a dotted name reaches into a struct column."""
    source: str = ""
    """Each row's task name (its data_source): one task per value, routed and reported apart."""


@dataclass(frozen=True)
class Row:
    prompt: str
    answer: str
    source: str
    system: str = ""
    """A system message the row carries (chat prompts)."""
    extra: dict = field(default_factory=dict)
    """The row's other columns, for the verifier."""


def read_rows(path: str, columns: Columns = Columns(), default_source: str = "data") -> tuple[Row, ...]:
    """Every row of the file at ``path`` (read once per process and kept: env hosts read the same file)."""
    resolved = Path(path).resolve()
    changed = resolved.stat().st_mtime_ns if resolved.exists() else 0
    return _read(str(resolved), changed, columns, default_source)


@functools.lru_cache(maxsize=8)
def _read(path: str, changed: int, columns: Columns, default_source: str) -> tuple[Row, ...]:
    """The rows of ``path`` as of its modification time ``changed`` (part of the cache key only)."""
    table = _load(path)
    names = list(table.column_names)
    if len(table) == 0:
        raise ConfigError(f"data={path!r} has no rows")
    prompt_col = _pick(path, names, columns.prompt, PROMPTS, "prompt")
    answer_col = _pick(path, names, columns.answer, ANSWERS, "answer")
    source_col = columns.source or (SOURCE if SOURCE in names else "")
    if source_col and source_col.split(".")[0] not in names:
        raise ConfigError(f"data={path!r} has no column {source_col!r} (columns: {names}); set columns.source=NAME")
    used = {c.split(".")[0] for c in (prompt_col, answer_col, source_col) if c}
    rows = []
    for i, record in enumerate(table):
        prompt, system = _prompt(path, i, _get(record, prompt_col))
        answer = _answer(_get(record, answer_col))
        source = str(_get(record, source_col)) if source_col else default_source
        extra = {k: v for k, v in record.items() if k not in used}
        rows.append(Row(prompt, answer, source or default_source, system, extra))
    return tuple(rows)


def _load(path: str) -> Any:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"data={path!r} does not exist; give a .json, .jsonl or .parquet file, or a folder written "
                          "by Dataset.save_to_disk")
    try:
        import datasets
    except ImportError:
        raise ConfigError("dataset tasks read files with Hugging Face datasets: pip install datasets") from None
    datasets.disable_progress_bars()  # one local file: no progress lines in the run's output
    try:
        if p.is_dir():
            loaded = datasets.load_from_disk(str(p))
            if isinstance(loaded, datasets.DatasetDict):
                if "train" not in loaded:
                    raise ConfigError(f"data={path!r} holds splits {list(loaded)}, none named 'train': point data= "
                                      "at one split's folder")
                loaded = loaded["train"]
            return loaded
        kind = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(p.suffix)
        if kind is None:
            raise ConfigError(f"data={path!r}: unknown file type {p.suffix!r}; give .json, .jsonl or .parquet, or a "
                              "save_to_disk folder")
        return datasets.load_dataset(kind, data_files=str(p), split="train")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any reader failure is the file's: one line naming it
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"data={path!r} cannot be read: {first}") from None


def _pick(path: str, names: list[str], given: str, candidates: tuple[str, ...], what: str) -> str:
    if given:
        if given.split(".")[0] not in names:
            raise ConfigError(f"data={path!r} has no column {given!r} (columns: {names}); set columns.{what}=NAME")
        return given
    for c in candidates:
        if c.split(".")[0] in names:
            return c
    raise ConfigError(f"data={path!r} has no {what} column (looked for {list(candidates)}; columns: {names}); set "
                      f"columns.{what}=NAME")


def _get(record: dict, column: str) -> Any:
    value: Any = record
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _prompt(path: str, i: int, value: Any) -> tuple[str, str]:
    """(the user prompt, the system message) of a prompt cell: a string, or chat messages."""
    if isinstance(value, str) and value.strip():
        return value, ""
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        users = [m["content"] for m in value if m.get("role") == "user"]
        systems = [m["content"] for m in value if m.get("role") == "system"]
        if users:
            return str(users[-1]), str(systems[0]) if systems else ""
    raise ConfigError(f"data={path!r} row {i}: the prompt is {type(value).__name__} {str(value)[:60]!r}; give a "
                      "non-empty string or chat messages with a user message")


def _answer(value: Any) -> str:
    """The reference as text; a GSM8K-style answer is the part after its last ``####``."""
    if value is None:
        return ""
    text = str(value)
    if GSM8K_MARK in text:
        text = text.rsplit(GSM8K_MARK, 1)[1].strip().replace(",", "")
    return text.strip()
