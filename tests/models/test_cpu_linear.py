"""rollart.models.cpu_linear: prepacked oneDNN linears equal F.linear, and stale packs are never used silently."""
import pytest
import torch
import torch.nn.functional as F

from rollart.models import cpu_linear

pytestmark = pytest.mark.skipif(not cpu_linear.available(torch.device("cpu")), reason="torch built without oneDNN")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_packed_linear_equals_f_linear(dtype, rows):
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 40, generator=g).to(dtype), torch.randn(96, generator=g).to(dtype)
    x = torch.randn(rows, 40, generator=g).to(dtype)
    lin = cpu_linear.PackedLinears(batch_hint=16)
    lin.pack([w])
    torch.testing.assert_close(lin(x, w, b), F.linear(x, w, b), rtol=1e-5 if dtype == torch.float32 else 1e-2,
                               atol=1e-5 if dtype == torch.float32 else 1e-2)
    other = torch.randn(8, 40).to(dtype)                                  # never packed: plain F.linear
    assert torch.equal(lin(x, other), F.linear(x, other))


def test_repack_follows_in_place_weight_changes():
    w = torch.randn(32, 16)
    x = torch.randn(4, 16)
    lin = cpu_linear.PackedLinears(batch_hint=4)
    lin.pack([w])
    w.mul_(2)
    lin.pack([w])
    torch.testing.assert_close(lin(x, w), F.linear(x, w))
