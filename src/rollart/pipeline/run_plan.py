"""Plan -> placement: the actors of a run placed as a HetRL plan says (``placement=plan.json``).

    python -m rollart.planner --topology cluster.yaml --workflow grpo-async --out plan.json
    python -m recipes.grpo_frozenlake placement=plan.json cluster.backend=ray cluster.address=auto

One inference worker per data-parallel replica of the plan's ``actor_gen`` task, on that replica's GPUs (its
class and device ids); one trainer rank per data-parallel replica of ``actor_train`` on that replica's GPUs
(``trainer.world_size`` is the plan's dp: rollart.trainer.group); the weight store on a CPU. The plan's other tasks (reference, reward
inference) have no process of their own in this pipeline and are listed as such. Locally, the plan must fit
the machine (its GPUs, when the run's devices are CUDA); on Ray each worker's devices become one
placement-group bundle of its class.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from rollart.config import ConfigError

log = logging.getLogger("rollart.pipeline")


@dataclass
class RunPlacement:
    source: str
    """The plan file."""
    generate: list[tuple[str, list[str]]]
    """(hardware class, device ids) of each inference worker, in rank order."""
    train: tuple[str, list[str]]
    """(hardware class, device ids) of the trainer."""
    train_dp: int = 1
    """Data-parallel replicas the plan gives actor_train: the run's trainer.world_size."""
    train_ranks: list[tuple[str, list[str]]] = field(default_factory=list)
    """(hardware class, device ids) of each trainer rank (one per actor_train replica), in rank order."""
    unplaced: list[str] = field(default_factory=list)
    """Plan tasks this pipeline runs no process for."""

    @classmethod
    def load(cls, path: str) -> "RunPlacement":
        """Read a plan (``Plan.to_json()``); ConfigError in one line when it is unreadable or unusable."""
        from rollart.distributed.plan_placements import PlacementError, worker_placements

        try:
            plan = json.loads(Path(path).read_text())
            workers = worker_placements(plan)
        except OSError as e:
            raise ConfigError(f"placement={path!r}: cannot read it ({e.strerror}); write one with "
                              "`python -m rollart.planner ... --out plan.json`") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            why = e if isinstance(e, (PlacementError, json.JSONDecodeError)) else f"bad field {e!r}"
            raise ConfigError(f"placement={path!r} is not a planner plan: {why}") from None
        gen = [w for w in workers if w.task == "actor_gen"]
        train = [w for w in workers if w.task == "actor_train"]
        if not gen or not train:
            raise ConfigError(f"placement={path!r}: the plan must place actor_gen and actor_train (it has "
                              f"{sorted({w.task for w in workers})})")
        for w in gen + train:
            if "+" in w.gpu_type:
                raise ConfigError(f"placement={path!r}: a {w.task} replica spans GPU types {w.gpu_type}; a worker "
                                  "runs on one hardware class: plan with one type per replica")
        train_types = sorted({w.gpu_type for w in train})
        if len(train_types) > 1:
            raise ConfigError(f"placement={path!r}: actor_train spans classes {train_types}; every trainer "
                              "rank runs on one class")
        train_ids = [d for w in train for d in w.device_ids]
        shared = sorted(set(train_ids) & {d for w in gen for d in w.device_ids})
        if shared:
            raise ConfigError(f"placement={path!r}: actor_gen and actor_train share GPUs {shared}; this pipeline "
                              "runs them as separate processes: plan them into separate groups")
        counts = sorted({len(w.device_ids) for w in train})
        if len(counts) > 1:
            raise ConfigError(f"placement={path!r}: actor_train replicas hold {counts} GPUs each; every trainer "
                              "rank needs the same count")
        return cls(path, [(w.gpu_type, w.device_ids) for w in gen], (train_types[0], train_ids), len(train),
                   [(w.gpu_type, w.device_ids) for w in train],
                   sorted({w.task for w in workers} - {"actor_gen", "actor_train"}))

    # -- what the run starts ---------------------------------------------------------------------
    @property
    def hw_classes(self) -> tuple[str, ...]:
        """Class of each inference worker, in rank order."""
        return tuple(hw for hw, _ in self.generate)

    @property
    def devices_per_worker(self) -> int:
        counts = {len(ids) for _, ids in self.generate}
        if len(counts) != 1:
            raise ConfigError(f"placement={self.source!r}: actor_gen replicas hold {sorted(counts)} GPUs each; "
                              "every inference worker needs the same count")
        return counts.pop()

    @property
    def devices_per_rank(self) -> int:
        """GPUs of each trainer rank (every actor_train replica holds as many)."""
        return len(self.train_ranks[0][1]) if self.train_ranks else len(self.train[1])

    def pools(self) -> dict[str, list[str]]:
        """The run's device ids per class, inference workers' first (the order they are bound in)."""
        pools: dict[str, list[str]] = {}
        for hw, ids in [*self.generate, self.train]:
            pools.setdefault(hw, []).extend(ids)
        return pools

    def gpu_count(self) -> int:
        return sum(len(ids) for _, ids in [*self.generate, self.train])

    def check_fits_locally(self, cuda: bool, visible_gpus: int) -> None:
        """A local run holds every planned GPU on this machine: one line when it does not fit. On CPU the
        classes are labels of processes (as ``hw_classes`` are), so only CUDA runs are counted."""
        if not cuda:
            log.info("placement=%s on CPU: %s are labels of the worker processes", self.source,
                     sorted(self.pools()))
            return
        need = self.gpu_count()
        if need > visible_gpus:
            by_class = ", ".join(f"{len(ids)} x {hw}" for hw, ids in self.pools().items())
            raise ConfigError(f"placement={self.source!r} places {need} GPUs ({by_class}) but this machine has "
                              f"{visible_gpus} visible: run it on a cluster with cluster.backend=ray, or plan for "
                              "this machine")

    def describe(self) -> str:
        gen = ", ".join(f"{hw}[{','.join(ids)}]" for hw, ids in self.generate)
        hw, ids = self.train
        note = f" as {self.train_dp} data-parallel ranks" if self.train_dp > 1 else ""
        rest = f"; not run as processes here: {', '.join(self.unplaced)}" if self.unplaced else ""
        return f"placement {self.source}: inference {gen}; trainer {hw}[{','.join(ids)}]{note}{rest}"
