"""Turn a batch of finished (or aborted) trajectories into namespaced scalars for the logger."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

from rollart.types import Trajectory
from rollart.versions import staleness_values


def trajectory_metrics(trajectories: Sequence[Trajectory], version: int | None = None) -> dict[str, float]:
    """Reward and success overall and per task, lengths, env/generation timings, abort/failure reasons.

    Aborted or failed trajectories are counted under ``rollout/aborted/<reason>`` / ``rollout/failed/<reason>``
    and left out of reward/success means (they were not trained on).
    """
    out: dict[str, float] = {}
    done = [t for t in trajectories if t.status not in ("aborted", "failed")]
    for status in ("aborted", "failed"):
        reasons = Counter((t.reason or "unknown") for t in trajectories if t.status == status)
        for reason, n in reasons.items():
            out[f"rollout/{status}/{reason.replace(' ', '_')}"] = float(n)
        out[f"rollout/{status}"] = float(sum(reasons.values()))
    out["rollout/trajectories"] = float(len(done))
    if not done:
        return out
    out["charts/reward"] = sum(t.reward for t in done) / len(done)
    out["charts/success"] = sum(bool(t.success) for t in done) / len(done)
    out["rollout/response_tokens_mean"] = sum(sum(t.loss_mask) for t in done) / len(done)
    out["rollout/total_tokens"] = float(sum(len(t.token_ids) for t in done))
    out["rollout/turns_mean"] = sum(t.num_turns for t in done) / len(done)
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in done:
        by_task[t.task].append(t)
    for task, ts in by_task.items():
        out[f"rollout/reward/{task}"] = sum(t.reward for t in ts) / len(ts)
        out[f"rollout/success/{task}"] = sum(bool(t.success) for t in ts) / len(ts)
        out[f"rollout/share/{task}"] = len(ts) / len(done)  # a task the staleness bound starves shows here
    timing_keys = sorted({k for t in done for k in t.timings})
    for key in timing_keys:
        out[f"system/traj_{key}_s_mean"] = sum(t.timings.get(key, 0.0) for t in done) / len(done)
    if version is not None:
        lags = staleness_values(done, version)
        out["rollout/staleness_traj_mean"] = sum(lags) / len(lags)
        out["rollout/staleness_traj_max"] = float(max(lags))
    return out
