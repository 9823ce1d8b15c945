"""Shared helpers for planner tests: tiny models and hand-checkable topologies."""
import json

from rollart.planner.topology import load
from rollart.planner.workflow import Workflow, WorkflowConfig

TINY = json.dumps({"name": "tiny", "layers": 4, "hidden": 256, "intermediate": 512, "vocab": 1000})


def tiny_workflow(**kw) -> Workflow:
    fields = dict(model=TINY, prompts_per_step=8, responses_per_prompt=2, seq_in=64, seq_out=32,
                  micro_batch_size=2, max_decode_batch=4)
    fields.update(kw)
    return Workflow(WorkflowConfig(**fields))


def two_node_topology(gpu_a="A100", gpu_b="L4", per_node=2, zone_b="z0", region_b="r0", links=None):
    return load({
        "name": "test", "gpus_per_node": per_node,
        "devices": [{"type": gpu_a, "count": per_node, "node": "a", "zone": "z0", "region": "r0"},
                    {"type": gpu_b, "count": per_node, "node": "b", "zone": zone_b, "region": region_b}],
        "links": links or {"same_zone": {"latency_ms": 0.1, "bandwidth_gbps": 80}},
    })
