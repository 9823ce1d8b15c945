"""What a checkpoint carries besides the trainer's state, so a resumed run reports as if never stopped: the
sample buffer's and the proxy's cumulative counters and the training time so far."""
from __future__ import annotations

from typing import Any

from rollart.rollout.buffer import SampleBuffer


def counters_snapshot(buffer: SampleBuffer, routing: dict[str, int], elapsed_s: float) -> dict[str, Any]:
    """The cumulative counters to store in a checkpoint's ``extra``."""
    return {"buffer": dict(buffer.counters), "evicted": dict(buffer.evicted), "aborted": dict(buffer.aborted),
            "buffered": buffer.buffered, "max_buffered": buffer.max_buffered, "routing": dict(routing),
            "elapsed_s": elapsed_s}


def restore_counters(snapshot: dict[str, Any], buffer: SampleBuffer, routing: dict[str, int]) -> float:
    """Add a checkpoint's counters to a fresh run's; returns the training seconds before the checkpoint.

    Trajectories that sat in the buffer when the checkpoint was taken did not survive the restart: they count
    as evicted for reason ``resume``, so accepted = trained + evicted + buffered still holds.
    """
    if not snapshot:  # a checkpoint written before counters were saved
        return 0.0
    buffer.counters.update(snapshot.get("buffer", {}))
    buffer.evicted.update(snapshot.get("evicted", {}))
    buffer.aborted.update(snapshot.get("aborted", {}))
    if snapshot.get("buffered"):
        buffer.evicted["resume"] += int(snapshot["buffered"])
    buffer.max_buffered = max(buffer.max_buffered, int(snapshot.get("max_buffered", 0)))
    for key, value in snapshot.get("routing", {}).items():  # the proxy's router shares this dict: update in place
        routing[key] = routing.get(key, 0) + value
    return float(snapshot.get("elapsed_s", 0.0))
