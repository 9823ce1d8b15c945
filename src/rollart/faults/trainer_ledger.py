"""The torch trainer, unchanged, plus a ledger: every train step appends the ids and rewards of the trajectories
it trained to the JSON-lines file named by ``$ROLLART_FAULTS_LEDGER`` (with this process's id), so the fault
suite counts what reached training from the trainer's side, across kills and restarts. Selected with
``trainer.backend=rollart.faults.trainer_ledger:LedgerTrainer``; runs in the trainer's own process."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rollart.trainer.torch_trainer import TorchTrainer

LEDGER_ENV = "ROLLART_FAULTS_LEDGER"


class LedgerTrainer(TorchTrainer):
    def __init__(self, cfg: Any, model: Any = None):
        super().__init__(cfg, model=model)
        path = os.environ.get(LEDGER_ENV)
        if not path:
            raise RuntimeError(f"LedgerTrainer writes its ledger to ${LEDGER_ENV}: set it to a file path")
        self.ledger = Path(path)
        self._write({"event": "start", "version": self.version})

    def train_step(self, batch: Any, shard: dict | None = None) -> dict:
        metrics = super().train_step(batch, shard=shard)
        if isinstance(batch, list):  # a dict batch (from build_batch) carries no trajectory ids; with ``shard``,
            # each data-parallel rank writes its own rows' ids, so the ledger still holds each trajectory once
            self._write({"event": "train", "version": self.version, "ids": [t.trajectory_id for t in batch],
                         "rewards": [float(t.reward) for t in batch]})
        return metrics

    def load_checkpoint(self, path: Any) -> dict:
        extra = super().load_checkpoint(path)
        self._write({"event": "load", "version": self.version, "path": str(path)})
        return extra

    def _write(self, record: dict) -> None:
        line = json.dumps({"pid": os.getpid(), **record}) + "\n"
        with open(self.ledger, "a") as f:  # one write per line: a kill leaves at most the last line cut
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
