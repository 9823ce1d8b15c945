"""A training run: its config (PipelineConfig, composed of the components' configs) and the Coordinator that
overlaps rollout, reward and training under the α-bounded protocol (RollArt §6.2).

    from rollart.pipeline import PipelineConfig, Coordinator
    result = asyncio.run(Coordinator(cfg, tasks).run())

Modes behind one switch (``PipelineConfig.mode``): ``async`` (ROLLART, α-bounded per turn, the default),
``areal`` (bound checked at trajectory start only), ``oneoff`` (rollout of batch k+1 overlaps training on
batch k, weights change only between batches) and ``sync`` (Sync+: rollout, then training, then update).

Config in three steps: ``config`` (the schema), ``resolve`` (derived values), ``preflight`` (checks that need
I/O); ``prepare`` (the model folder). The run: ``coordinator`` (Coordinator), ``run`` (Run: the objects a loop
drives), ``loops`` (one loop per mode), ``train_steps`` (a train step and its accounting), ``run_state``
(RunState, RunResult), ``run_actors`` / ``run_plan`` (its actors, placed), ``parts`` (scoring, buffer, env
managers), ``recovery``, ``checkpointing``, ``evaluate`` and ``heldout`` (evaluations).

Importing it changes nothing process-wide; a script that wants a config mistake to end with one
``error: ...`` line instead of a traceback runs under ``rollart.config.exit_on_config_error()``.
"""
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.coordinator import Coordinator
from rollart.pipeline.run_state import RunResult

__all__ = ["Coordinator", "PipelineConfig", "RunResult"]
