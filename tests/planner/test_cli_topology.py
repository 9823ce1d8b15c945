"""Covers topology/workflow loading (YAML, JSON, presets, relayed links) and `python -m rollart.planner` end to end."""
import json
import subprocess
import sys

import pytest

from rollart.config import ConfigError
from rollart.planner.scenarios import SCENARIOS, scenario
from rollart.hardware import HARDWARE
from rollart.planner.topology import TopologyError, load
from rollart.planner.workflow import load_workflow

YAML_TOPO = """
name: two-sites
gpus_per_node: 4
gpu_types: {X9: {tflops: 100, memory_gb: 32, hbm_gb_s: 900, intra_gb_s: 64}}
devices:
  - {type: H800, count: 4, node: h, zone: a1, region: east}
  - {type: H20, count: 4, node: g, zone: a1, region: east}
  - {type: X9, count: 2, node: x, zone: w1, region: west}
links:
  regions: [{a: east, b: west, latency_ms: 20, bandwidth_gbps: 10}]
"""


def test_yaml_topology_with_custom_gpu_and_presets(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text(YAML_TOPO)
    topo = load(path)
    assert [d.spec.name for d in topo.devices] == ["H800"] * 4 + ["H20"] * 4 + ["X9"] * 2
    assert topo.devices[4].spec is HARDWARE["H20"] and topo.devices[9].spec.hbm_gb_s == 900
    east_west = topo.latency[0, 9], topo.bandwidth[0, 9]
    assert east_west == (pytest.approx(0.02), pytest.approx(10e9 / 8))
    assert topo.bandwidth[0, 4] == pytest.approx(100e9 / 8)  # same zone, different nodes: default 100 Gbit/s
    assert topo.bandwidth[0, 1] == pytest.approx(400e9)  # NVLink within the H800 node


def test_edge_gpus_reach_ohio_only_through_virginia():
    topo = scenario("multi-region-hybrid")
    edge = next(d.index for d in topo.devices if d.zone == "virginia-edge")
    ohio = next(d.index for d in topo.devices if d.region == "ohio")
    assert topo.relayed[edge, ohio]
    assert topo.bandwidth[edge, ohio] == pytest.approx(1e9 / 8)  # the 1 Gbit/s edge hop bounds it
    assert topo.latency[edge, ohio] == pytest.approx(12e-3)  # 2 ms to Virginia + 10 ms to Ohio


def test_all_scenarios_have_the_paper_testbed():
    for name in SCENARIOS:
        topo = scenario(name)
        assert len(topo.devices) == 64
        lat = topo.latency[topo.bandwidth > 0]
        assert lat.max() <= 0.0601


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(TopologyError, match="unknown GPU type 'B300'"):
        load({"devices": [{"type": "B300", "count": 1}]})
    with pytest.raises(TopologyError, match="unknown GPU type 'cpu'"):
        load({"devices": [{"type": "cpu", "count": 1}]})
    with pytest.raises(TopologyError, match="gpu_types: GPU type 'X': tflops must be > 0"):
        load({"gpu_types": {"X": {"tflops": 0, "memory_gb": 1, "hbm_gb_s": 1, "intra_gb_s": 1}},
              "devices": [{"type": "X", "count": 1}]})
    with pytest.raises(TopologyError, match="unknown topology preset"):
        scenario("moon-base")
    with pytest.raises(ConfigError, match="unknown model preset"):
        load_workflow("ppo", ["model=gpt-9"])
    bad = tmp_path / "wf.json"
    bad.write_text(json.dumps({"algorithm": "ppo", "batch": 3}))
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['batch'\]"):
        load_workflow(str(bad))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "rollart.planner", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_prints_table_and_json_plan(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text(YAML_TOPO)
    out = tmp_path / "plan.json"
    r = _run("--topology", str(path), "--workflow", "grpo-async", "model=qwen3-1.7b", "prompts_per_step=32",
             "--budget", "200", "--time-limit", "20", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "estimated step time" in r.stdout and "actor_gen" in r.stdout
    plan = json.loads(out.read_text())
    assert plan["est_step_time_s"] > 0
    tasks = sorted(t for g in plan["groups"] for t in g["tasks"])
    assert tasks == ["actor_gen", "actor_train", "ref_inf", "reward_inf"]
    ids = [d["id"] for g in plan["groups"] for d in g["devices"]]
    assert len(ids) == len(set(ids)) and set(ids) == set(plan["per_device_memory_gb"])
    for g in plan["groups"]:
        assert g["tp"] * g["pp"] * g["dp"] == len(g["devices"])
        assert {"type", "node", "zone", "region"} <= set(g["devices"][0])


def test_cli_reports_errors_without_traceback():
    r = _run("--topology", "nowhere.yaml", "--workflow", "ppo")
    assert r.returncode == 1 and "error: topology 'nowhere.yaml'" in r.stderr and "Traceback" not in r.stderr
    r = _run("--topology", "single-region", "--gpus", "L4:2", "--workflow", "ppo", "model=qwen3-32b",
             "--budget", "20")
    assert r.returncode == 1 and "no plan fits in memory" in r.stderr and "Traceback" not in r.stderr
