"""StateManager: bit-exact round trips through host and disk tiers, de-duplication of aliased and
replicated tensors, prefetch, and checkpoint materialisation from managed state."""
import pytest
import torch
from safetensors.torch import load_file

from rollart.multiplex.state import StateManager


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(64, 16, generator=g)
    return {"embed": emb, "lm_head": emb,  # tied: same storage under two names
            "w": torch.randn(16, 16, generator=g).to(torch.bfloat16),
            "step": torch.tensor(7.0), "idx": torch.arange(5)}


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_round_trip_is_bit_exact(tmp_path, tier):
    sm = StateManager(tmp_path)
    state = _state()
    expected = {k: v.clone() for k, v in state.items()}
    sm.offload("job", state, tier=tier)
    assert sm.tier("job") == tier
    back = sm.restore("job")
    assert sm.tier("job") == "device"
    assert set(back) == set(expected)
    for k, v in expected.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k].view(torch.uint8) if v.dtype == torch.bfloat16
                                                        else back[k], v.view(torch.uint8) if v.dtype == torch.bfloat16 else v)
    assert back["embed"] is back["lm_head"]  # the alias is restored as an alias


def test_aliases_and_replicas_are_stored_once(tmp_path):
    sm = StateManager(tmp_path)
    ranks = [_state(0), _state(0), _state(0)]  # three data-parallel replicas, each with a tied embedding
    sm.offload("job", ranks, tier="host")
    stats = sm.stats()
    one_copy = sum(t.numel() * t.element_size() for k, t in _state(0).items() if k != "lm_head")
    assert stats["host_bytes"] == one_copy
    assert stats["logical_bytes"] == 3 * (one_copy + 64 * 16 * 4)
    assert sm.jobs["job"].replicas["embed"] == 6  # 3 ranks x 2 names


def test_disagreeing_replicas_are_refused(tmp_path):
    sm = StateManager(tmp_path)
    with pytest.raises(ValueError, match="ranks disagree"):
        sm.offload("job", [_state(0), _state(1)])


def test_prefetch_then_restore_and_materialize(tmp_path):
    sm = StateManager(tmp_path / "spill")
    sm.offload("a", _state(3), tier="disk")
    assert sm.stats()["disk_bytes"] > 0 and sm.stats()["host_bytes"] == 0
    out = sm.materialize("a", tmp_path / "ckpt.safetensors")  # from disk, job stays offloaded
    assert sm.tier("a") == "disk"
    saved = load_file(str(out))
    assert torch.equal(saved["embed"], _state(3)["embed"]) and "lm_head" not in saved  # canonical keys only
    sm.prefetch("a").result(timeout=30)
    assert sm.tier("a") == "host"
    part = sm.read("a", ["w"])
    assert torch.equal(part["w"].view(torch.uint8), _state(3)["w"].view(torch.uint8))
    back = sm.restore("a")
    assert torch.equal(back["embed"], _state(3)["embed"])
    assert not list((tmp_path / "spill").iterdir())  # spill file gone once resident
    sm.close()


def test_unknown_job_names_the_known_ones(tmp_path):
    sm = StateManager(tmp_path)
    sm.offload("lake", _state())
    with pytest.raises(KeyError, match="lake"):
        sm.restore("lak")
