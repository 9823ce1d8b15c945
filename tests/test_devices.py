"""rollart.devices: one decision for device and dtype."""
import pytest
import torch

from rollart.config import ConfigError
from rollart.devices import check_device, check_dtype, peak_memory, placement, resolve_device


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_settings_accepted(spec):
    check_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "CUDA", "cuda:", "cuda:x", "", "mps"])
def test_bad_device_is_one_line_error(spec):
    with pytest.raises(ConfigError) as e:
        check_device(spec, key="engine.device")
    assert "engine.device" in str(e.value) and "auto | cpu | cuda | cuda:N" in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_dtype_is_one_line_error():
    with pytest.raises(ConfigError, match="trainer.dtype='fp8'"):
        check_dtype("fp8", key="trainer.dtype")


def test_cpu_placements():
    assert placement("cpu", "auto") == placement("cpu", "float32")
    p = placement("cpu", "bfloat16")
    assert p.device.type == "cpu" and p.dtype is torch.bfloat16 and not p.is_cuda


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answers")
def test_auto_without_gpu_is_cpu_fp32_and_cuda_is_refused():
    p = placement()
    assert p.device.type == "cpu" and p.dtype is torch.float32
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        resolve_device("cuda", key="trainer.device")


@pytest.mark.cuda
def test_auto_with_gpu_is_cuda_bf16():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    p = placement()
    assert p.is_cuda and p.dtype is torch.bfloat16
    with pytest.raises(ConfigError, match="CUDA device"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_peak_memory_is_empty_on_the_cpu():
    assert peak_memory("cpu") == {}
