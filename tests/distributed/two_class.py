"""A two-class cluster (H800 + H20 nodes) for the placement tests: its topology, a plan for it made by the
planner's CLI (and that plan with data-parallel trainer ranks), and a tiny FrozenLake task."""
import json
import subprocess
import sys

from rollart.rollout.env_manager import TaskSpec

TOPOLOGY = {"name": "two-class", "gpus_per_node": 2,
            "devices": [{"type": "H800", "count": 2, "node": "n800", "zone": "z0", "region": "r0"},
                        {"type": "H20", "count": 2, "node": "n20", "zone": "z0", "region": "r0"}],
            "links": {"same_zone": {"latency_ms": 0.1, "bandwidth_gbps": 100}}}
TINY = json.dumps({"name": "tiny", "layers": 4, "hidden": 256, "intermediate": 512, "vocab": 1000})
FROZEN = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                  max_new_tokens=1, max_turns=6)


def make_plan(tmp_path) -> tuple[str, dict]:
    """``python -m rollart.planner ... --out plan.json`` for the two-class topology; (path, plan)."""
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(TOPOLOGY))
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "rollart.planner", "--topology", str(topo), "--workflow", "grpo-async",
                        f"model={TINY}", "prompts_per_step=8", "--budget", "200", "--time-limit", "20",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return str(out), json.loads(out.read_text())


def planned(plan: dict, task: str) -> tuple[set[str], list[str], int]:
    """(classes, device ids, data-parallel replicas) of ``task`` in the plan, read straight from its JSON."""
    group = next(g for g in plan["groups"] if task in g["tasks"])
    return {d["type"] for d in group["devices"]}, [d["id"] for d in group["devices"]], group["parallel"][task]["dp"]


def with_train_ranks(plan: dict) -> dict:
    """``plan`` with actor_train data parallel over its group's devices (one trainer rank per device), as the
    planner writes a dp > 1 plan."""
    out = json.loads(json.dumps(plan))
    group = next(g for g in out["groups"] if "actor_train" in g["tasks"])
    group["parallel"]["actor_train"] = {"tp": 1, "pp": 1, "dp": len(group["devices"]), "layout": "replica"}
    return out
