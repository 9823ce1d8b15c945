"""Covers the DeepSpeed backend with ZeRO-3 over 2 real gloo processes: same update as the 1-process torch
backend on the same batches, checkpoint round-trip, clean exit. On a fresh machine DeepSpeed first compiles
its shared-memory all-reduce kernel (~20 s, cached in ~/.cache/torch_extensions)."""
import importlib.util
import os

import pytest

from test_deepspeed import check_against_torch, run_workers

pytestmark = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                reason="deepspeed not installed (pip install deepspeed)")


def test_zero3_two_processes_match_torch_backend(tmp_path):
    report = run_workers(tmp_path, world=2, stages="3", port=29500 + os.getpid() % 190)
    check_against_torch(tmp_path, report, stages=(3,))
