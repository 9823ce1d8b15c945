"""The benchmarks under tools/bench, imported for their tests: a bench imports its siblings by name (``cross_core``,
``tts_paper``), so its folder is on ``sys.path`` while it loads, and only then."""
import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"


def bench_module(name: str):
    """``tools/bench/<name>.py`` as a module."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)
