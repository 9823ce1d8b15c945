"""Unit tests of ResourceManager and hardware classes: pools, role defaults, fallback, binding table, plans."""
import pytest

from rollart.distributed import ResourceExhaustedError, ResourceManager
from rollart.distributed.hardware import fallbacks


def test_role_defaults():
    rm = ResourceManager({"H800": 8, "H20": 24, "cpu": 64, "serverless": "http://fc.example/r"})
    assert rm.default_hw_class("train") == "H800"      # compute-optimized
    assert rm.default_hw_class("generate") == "H20"    # bandwidth-optimized
    assert rm.default_hw_class("env") == "cpu"
    assert rm.default_hw_class("reward") == "serverless"
    assert ResourceManager({"H20": 2, "cpu": 2}).default_hw_class("reward") == "cpu"  # local
    assert ResourceManager({"H800": 1}, role_hw_class={"generate": "H800"}).default_hw_class("generate") == "H800"
    with pytest.raises(ValueError, match="unknown role 'trainer'"):
        rm.default_hw_class("trainer")


def test_paper_style_device_lists():
    rm = ResourceManager({"H800": list(range(0, 8))}, {"H20": list(range(8, 32))})
    assert rm.capacity == {"H800": 8, "H20": 24}
    b = rm.allocate("generate", owner="g0", count=2)
    assert b.hw_class == "H20" and b.devices == [8, 9]


def test_fallback_when_exhausted_and_release():
    rm = ResourceManager({"H800": 1, "A100": 1, "H20": 4})
    a = rm.allocate("train", owner="t0")
    b = rm.allocate("train", owner="t1")
    c = rm.allocate("train", owner="t2")
    assert (a.hw_class, b.hw_class, c.hw_class) == ("H800", "A100", "H20")
    assert not a.fell_back and b.fell_back and "H800 exhausted" in b.note
    rm.release(a)
    assert rm.allocate("train", owner="t3").hw_class == "H800"


def test_exhausted_everywhere_names_what_is_free():
    rm = ResourceManager({"H800": 1, "cpu": 2})
    rm.allocate("train", owner="t0")
    with pytest.raises(ResourceExhaustedError, match=r"t1.*1 x H800.*free now: \{'H800': 0, 'cpu': 2\}"):
        rm.allocate("train", owner="t1")
    with pytest.raises(ResourceExhaustedError):
        rm.allocate("env", owner="e", count=3)  # cpu has no stand-in


def test_fallback_order_matches_what_the_class_is_good_at():
    pools = ["H800", "H20", "A100", "L40S", "L4", "cpu"]
    assert fallbacks("H20", pools)[0] == "H800"       # next-highest HBM bandwidth
    assert fallbacks("H800", pools)[0] == "L40S"      # next-highest TFLOPS
    assert fallbacks("serverless", pools) == ["cpu"]
    assert fallbacks("cpu", pools) == []


def test_binding_table_is_readable():
    rm = ResourceManager({"H800": 1, "H20": 2, "serverless": "http://fc.example"})
    rm.allocate("train", owner="trainer-0")
    rm.allocate("train", owner="trainer-1")
    rm.allocate("reward", owner="reward-0")
    table = rm.binding_table()
    lines = table.splitlines()
    assert lines[0].split() == ["worker", "role", "preferred", "bound", "devices", "note"]
    assert lines[2].split()[:5] == ["trainer-0", "train", "H800", "H800", "0"]
    assert lines[3].split()[:5] == ["trainer-1", "train", "H800", "H20", "0"] and "fallback" in lines[3]
    assert "reward-0" in lines[4] and "serverless" in lines[4]
    assert lines[-1] == "pools: H800 0/1 free, H20 1/2 free, serverless http://fc.example"


def test_bad_pools_get_clear_errors():
    with pytest.raises(KeyError, match="unknown hardware class 'B200'"):
        ResourceManager({"B200": 8})
    with pytest.raises(ValueError, match="needs an http"):
        ResourceManager({"serverless": "fc://xxx"})
    with pytest.raises(TypeError, match="device count or a list"):
        ResourceManager({"H20": "many"})


def test_from_plan():
    plan = {"groups": [{"role": "train", "devices": [{"type": "H800", "id": 0}, {"type": "H800", "id": 1}]},
                       {"role": "generate", "devices": [{"type": "H20"}, {"type": "H20"}, {"type": "H800"}]}],
            "serverless_url": "http://fc.example"}
    rm = ResourceManager.from_plan(plan)
    assert rm.capacity == {"H800": 3, "H20": 2} and rm.serverless_url == "http://fc.example"
    assert rm.free["H800"] == [0, 1, "H800:2"]  # planned ids kept, anonymous devices numbered
    assert rm.default_hw_class("generate") == "H20" and rm.default_hw_class("train") == "H800"
    with pytest.raises(ValueError, match="'groups' list"):
        ResourceManager.from_plan({"nodes": []})
    with pytest.raises(ValueError, match="group 0 needs 'devices'"):
        ResourceManager.from_plan({"groups": [{"role": "train", "devices": ["H800"]}]})


def test_cuda_env_names_a_gpu_binding_s_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rm = ResourceManager({"H800": [2, 3], "H20": 1, "cpu": 2}, {"A100": ["A100:0"]})
    assert rm.allocate("train", hw="H800", count=2, owner="t").cuda_env() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert rm.allocate("generate", hw="H20", owner="g").cuda_env() == {"CUDA_VISIBLE_DEVICES": "0"}
    assert rm.allocate("env", hw="cpu", owner="e").cuda_env() == {}  # CPU classes: environment unchanged
    assert rm.allocate("train", hw="A100", owner="a").cuda_env() == {}  # symbolic ids are not GPU ordinals


def test_cuda_env_counts_within_the_parent_s_visible_gpus(monkeypatch):
    rm = ResourceManager({"H800": 2})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    first, second = rm.allocate("train", owner="t0"), rm.allocate("train", owner="t1")
    assert first.cuda_env() == {"CUDA_VISIBLE_DEVICES": "4"} and second.cuda_env() == {"CUDA_VISIBLE_DEVICES": "6"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert first.cuda_env() == {"CUDA_VISIBLE_DEVICES": "5"}
    assert second.cuda_env() == {}  # more bound than shown: the child keeps what the parent sees (warned)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert first.cuda_env() == {}  # an empty setting hides every GPU, and the child inherits it
