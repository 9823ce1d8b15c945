"""Covers rollart.pipeline.run_plan: a planner plan (from `python -m rollart.planner --out`) places a run's
inference workers and trainer on the plan's classes and devices (one trainer rank per data-parallel replica of
actor_train); bad plans and plans that do not fit stop with one line."""
import asyncio
import dataclasses
import json

import pytest

import envs  # noqa: F401  (registers rollart/FrozenLake-v0)
from rollart.config import ConfigError, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.pipeline.run_actors import start_actors
from rollart.pipeline.prepare import prepare_run
from rollart.pipeline.run_plan import RunPlacement
from rollart.pipeline.preflight import preflight
from rollart.pipeline.resolve import resolve
from rollart.pipeline.run_state import RunTasks
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from tests.distributed.two_class import make_plan, planned, with_train_ranks


def checked(cfg: PipelineConfig) -> PipelineConfig:
    """What a run does with ``cfg`` before it starts anything: preflight (reads the plan), then resolve."""
    return resolve(cfg, preflight(cfg, RunTasks([], [], [])))


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return make_plan(tmp_path_factory.mktemp("plan"))


def test_a_plan_sets_the_workers_and_places_them_locally(tmp_path, plan):
    path, doc = plan
    gen_classes, gen_ids, gen_dp = planned(doc, "actor_gen")
    train_classes, train_ids, train_dp = planned(doc, "actor_train")
    cfg = parse_overrides(PipelineConfig(), [f"placement={path}", f"logdir={tmp_path}", "run_name=p",
                                             "actor_mode=inprocess", "trainer_actor_mode=process", "quiet=true"])
    cfg = dataclasses.replace(cfg, rollout=SchedulerConfig(group_size=2, max_concurrency=4),
                              trainer=TrainerConfig(num_threads=1))
    prepared = prepare_run(cfg)  # on CPU the classes are labels: a plan of 4 GPUs fits
    resolved = prepared.config
    assert resolved.num_inference_workers == gen_dp and set(resolved.hw_classes) == gen_classes
    assert resolved.trainer.world_size == train_dp  # one trainer rank per actor_train replica

    async def start():
        c = await start_actors(resolved, prepared.plan)
        try:
            return {b.owner: (b.hw_class, list(b.devices)) for b in c.resources.bindings}
        finally:
            await c.close()

    bound = asyncio.run(start())
    gen = [bound[f"gen-{i}"] for i in range(gen_dp)]
    assert {hw for hw, _ in gen} == gen_classes
    assert sorted(d for _, ids in gen for d in ids) == sorted(gen_ids)  # each planned GPU to one worker
    ranks = [bound[f"trainer-{r}"] for r in range(train_dp)]
    assert {hw for hw, _ in ranks} == train_classes and {len(ids) for _, ids in ranks} == {len(train_ids) // train_dp}
    assert sorted(d for _, ids in ranks for d in ids) == sorted(train_ids)  # each planned GPU to one rank
    assert bound["weight-store-0"][0] == "cpu"


def test_the_trainer_world_size_comes_from_the_plan(tmp_path, plan):
    """Whatever dp the planner chose above, a dp=2 actor_train gives two ranks, each on its replica's GPU."""
    path, doc = plan
    dp_plan = tmp_path / "dp.json"
    dp_plan.write_text(json.dumps(with_train_ranks(doc)))
    train_classes, train_ids, _ = planned(with_train_ranks(doc), "actor_train")
    assert len(train_ids) == 2, train_ids  # the two-class topology's trainer group: two GPUs
    placement = RunPlacement.load(str(dp_plan))
    assert placement.train_dp == 2 and placement.devices_per_rank == 1
    assert placement.train_ranks == [(train_classes.pop(), [train_ids[0]]), (placement.train[0], [train_ids[1]])]
    assert "as 2 data-parallel ranks" in placement.describe()
    assert checked(PipelineConfig(placement=str(dp_plan), trainer_actor_mode="process")).trainer.world_size == 2
    with pytest.raises(ConfigError, match=r"trainer.world_size=3 but placement=.* plans 2 data-parallel trainer"):
        checked(PipelineConfig(placement=str(dp_plan), trainer=TrainerConfig(world_size=3)))
    with pytest.raises(ConfigError, match=r"plans 2 data-parallel trainer ranks, one process each"):
        checked(PipelineConfig(placement=str(dp_plan), actor_mode="inprocess"))


def test_plans_that_do_not_fit_or_conflict_stop_with_one_line(tmp_path, plan):
    path, doc = plan
    placement = RunPlacement.load(path)
    with pytest.raises(ConfigError, match=r"places 4 GPUs \(.*\) but this machine has 1 visible: run it on a "
                                          r"cluster with cluster.backend=ray"):
        placement.check_fits_locally(cuda=True, visible_gpus=1)
    placement.check_fits_locally(cuda=True, visible_gpus=4)
    with pytest.raises(ConfigError, match="num_inference_workers / hw_classes come from placement="):
        checked(PipelineConfig(placement=path, num_inference_workers=3))
    with pytest.raises(ConfigError, match="cannot read it"):
        checked(PipelineConfig(placement=str(tmp_path / "missing.json")))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"groups": [{"tasks": ["actor_gen"], "devices": []}]}))
    with pytest.raises(ConfigError, match="is not a planner plan: group 0: needs 'devices' and 'parallel'"):
        checked(PipelineConfig(placement=str(bad)))
    shared = json.loads(json.dumps(doc))
    for g in shared["groups"]:  # colocate training with generation, on the generation GPUs
        if "actor_train" in g["tasks"]:
            g["tasks"].remove("actor_train")
            del g["parallel"]["actor_train"]
    gen_group = next(g for g in shared["groups"] if "actor_gen" in g["tasks"])
    gen_group["tasks"].append("actor_train")
    gen_group["parallel"]["actor_train"] = gen_group["parallel"]["actor_gen"]
    (tmp_path / "shared.json").write_text(json.dumps(shared))
    with pytest.raises(ConfigError, match="actor_gen and actor_train share GPUs"):
        checked(PipelineConfig(placement=str(tmp_path / "shared.json")))
