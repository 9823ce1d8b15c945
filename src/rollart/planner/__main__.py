"""Plan an RL workflow onto heterogeneous GPUs and print the plan as a table and as JSON.

    python -m rollart.planner --topology multi-country --workflow ppo
    python -m rollart.planner --topology cluster.yaml --workflow grpo-async model=qwen3-14b --out plan.json
    python -m rollart.planner --topology single-region --gpus A100:8,L40S:8,L4:8 --workflow ppo --planner ilp

--topology: a preset (single-region, multi-region-hybrid, multi-country, multi-continent; GPU mix from
--gpus, default the paper's 24 A100 + 24 L40S + 16 L4) or a YAML/JSON file (see
rollart.planner.topology.load). --workflow: ppo, grpo, ppo-async, grpo-async or a YAML/JSON file of
WorkflowConfig fields; trailing key=value pairs override workflow fields (``--help-workflow`` lists them).
A training run places its actors as the plan says with ``placement=plan.json`` (rollart.pipeline.run_plan).
"""
from __future__ import annotations

import argparse
import json
import sys

from rollart.config import describe, exit_on_config_error

from . import make_plan
from .plan import PlanningError
from .topology import TopologyError
from .workflow import WorkflowConfig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rollart.planner", description=__doc__.split("\n")[0])
    ap.add_argument("--topology", required="--help-workflow" not in (argv or sys.argv),
                    help="preset name or YAML/JSON file")
    ap.add_argument("--gpus", default=None, help="GPU mix for presets, e.g. A100:24,L40S:24,L4:16")
    ap.add_argument("--workflow", default="ppo", help="preset name or YAML/JSON file")
    ap.add_argument("--planner", default="sha-ea", choices=["sha-ea", "ilp", "homogeneous", "two-group"])
    ap.add_argument("--budget", type=int, default=4000, help="SHA-EA budget in plan evaluations")
    ap.add_argument("--time-limit", type=float, default=55.0, help="search wall-clock cap, seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0,
                    help="SHA-EA search processes (0 = one per CPU this process may use, 1 = no extra process)")
    ap.add_argument("--out", "--json", dest="json", default=None,
                    help="write the plan JSON here instead of stdout (a run takes it as placement=FILE)")
    ap.add_argument("--help-workflow", action="store_true", help="list workflow fields and exit")
    args, overrides = ap.parse_known_args(argv)
    if args.help_workflow:
        print(describe(WorkflowConfig()))
        return 0
    bad = [o for o in overrides if "=" not in o]
    if bad:
        ap.error(f"unrecognised arguments {bad}; workflow overrides are written key=value")
    with exit_on_config_error(TopologyError, PlanningError):
        plan = make_plan(args.topology, args.workflow, overrides=overrides, planner=args.planner,
                         gpus=args.gpus, budget=args.budget, time_limit_s=args.time_limit, seed=args.seed,
                         workers=args.workers)
    print(plan.table())
    out = json.dumps(plan.to_json(), indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(out + "\n")
        print(f"plan written to {args.json}")
    else:
        print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
