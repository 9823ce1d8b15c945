"""Covers the recipes' end-of-run device line: peak GPU memory of the actors that ran on a GPU, none on CPU."""
from rollart.pipeline import RunResult

from recipes.launch import peak_gpu_memory_line


def test_peak_gpu_memory_line_names_only_gpu_actors():
    on_cpu = RunResult(steps=1, version=1, final_success={}, devices={"trainer": {"device": "cpu", "dtype": "float32"}})
    assert peak_gpu_memory_line(on_cpu) is None
    mixed = RunResult(steps=1, version=1, final_success={}, devices={
        "gen-0": {"device": "cuda:0", "peak_memory_gb": 3.25}, "trainer": {"device": "cuda:0", "peak_memory_gb": 1.5}})
    assert peak_gpu_memory_line(mixed) == "peak_gpu_memory_gb gen-0=3.25 trainer=1.50"
