"""A training run: its config (PipelineConfig, composed of the components' configs) and the Coordinator that
overlaps rollout, reward and training under the α-bounded protocol (RollArt §6.2).

    from rollart.pipeline import PipelineConfig, Coordinator
    result = asyncio.run(Coordinator(cfg, tasks).run())

Modes behind one switch (``PipelineConfig.mode``): ``async`` (ROLLART, α-bounded per turn, the default),
``areal`` (bound checked at trajectory start only), ``oneoff`` (rollout of batch k+1 overlaps training on
batch k, weights change only between batches) and ``sync`` (Sync+: rollout, then training, then update).

Importing it makes an uncaught ConfigError (and the other ``rollart.config.ONE_LINE_ERRORS``) end a script
with one ``error: ...`` line instead of a traceback.
"""
from rollart.config import install_excepthook
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.coordinator import Coordinator, RunResult

install_excepthook()  # a script's config mistake ends with one line, not a traceback (ROLLART_TRACEBACK=1 shows it)

__all__ = ["Coordinator", "PipelineConfig", "RunResult"]
