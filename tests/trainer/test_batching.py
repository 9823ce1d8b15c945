"""Covers rollart.trainer.batching: padding, advantages on model tokens only, validation, micro-batches."""
import pytest
import torch

from rollart.types import Trajectory
from rollart.trainer.batching import BatchError, build_batch, micro_batches, select_rows, shard_rows

from tiny_policy import make_trajectories


def _traj(tid, gid, ids, mask, reward, versions=None):
    return Trajectory(trajectory_id=tid, group_id=gid, task="t", token_ids=ids, loss_mask=mask,
                      logprobs=[-1.0 * m for m in mask], versions=versions or [3 if m else -1 for m in mask],
                      reward=reward)


def test_build_batch_pads_right_and_places_advantages_and_rewards():
    trajs = [_traj("a", "g", [5, 6, 7, 8], [0, 1, 0, 1], 1.0), _traj("b", "g", [5, 9], [0, 1], 0.0)]
    b = build_batch(trajs, pad_id=0, adv_eps=0.0)
    assert b["input_ids"].tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert b["loss_mask"].tolist() == [[0, 1, 0, 1], [0, 1, 0, 0]]
    a = 0.5 / (2 ** 0.5 / 2)  # (1 - 0.5) / unbiased std of [1, 0]
    assert torch.allclose(b["advantages"], torch.tensor([[0, a, 0, a], [0, -a, 0, 0]]))
    assert b["token_rewards"].tolist() == [[0, 0, 0, 1.0], [0, 0, 0, 0]]
    assert b["versions"].tolist() == [[-1, 3, -1, 3], [-1, 3, -1, -1]]
    assert b["behav_logprobs"].tolist() == [[0, -1, 0, -1], [0, -1, 0, 0]]
    assert b["lengths"].tolist() == [4, 2]


def test_bad_trajectories_get_clear_errors():
    with pytest.raises(BatchError, match="logprobs has 1 entries"):
        build_batch([Trajectory("x", "g", "t", token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0], versions=[0, 0])])
    with pytest.raises(BatchError, match="loss_mask\\[0\\]"):
        build_batch([_traj("y", "g", [1, 2], [1, 1], 0.0)])
    aborted = _traj("z", "g", [1, 2], [0, 1], 0.0)
    aborted.status, aborted.reason = "aborted", "stale"
    with pytest.raises(BatchError, match="'z' is aborted \\(stale\\)"):
        build_batch([aborted])
    with pytest.raises(BatchError, match="no trajectories"):
        build_batch([])


def test_micro_batches_respect_budget_and_cover_every_row_once():
    b = build_batch(make_trajectories(4, 4, seed=1))
    budget = 40
    micros = micro_batches(b, budget)
    def unpadded(batch):
        return [tuple(r[:n]) for r, n in zip(batch["input_ids"].tolist(), batch["lengths"].tolist())]

    seen = []
    for m in micros:
        rows, T = m["input_ids"].shape
        assert rows == 1 or rows * T <= budget
        assert T == int(m["lengths"].max())  # trailing padding trimmed
        seen += unpadded(m)
    assert len(micros) > 1
    assert sorted(seen) == sorted(unpadded(b))


def test_shard_rows_partition():
    parts = [shard_rows(7, r, 3) for r in range(3)]
    assert sorted(sum(parts, [])) == list(range(7))
    sub = select_rows(build_batch(make_trajectories(1, 3)), [2, 0])
    assert sub["input_ids"].shape[0] == 2


def test_a_forked_trajectory_trains_each_segment_as_its_own_row_with_one_advantage():
    """Agent trajectories that forked (rollart.gateway.record) carry earlier segments in info['segments']."""
    from rollart.types import Trajectory
    seg = dict(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.5], versions=[-1, 0, 0])
    forked = Trajectory("a", "g", "agent", token_ids=[4, 5], loss_mask=[0, 1], logprobs=[0.0, -1.0],
                        versions=[-1, 0], reward=1.0, info={"segments": [seg]})
    plain = Trajectory("b", "g", "agent", token_ids=[4, 6], loss_mask=[0, 1], logprobs=[0.0, -1.0],
                       versions=[-1, 0], reward=0.0)
    batch = build_batch([forked, plain])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 5, 0], [4, 6, 0]]
    adv = batch["advantages"]
    # one advantage per trajectory (a group of two, not three): both rows of the forked one share it
    assert adv[0, 1] == adv[1, 1] > 0 > adv[2, 1]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [0, 1, 0], [0, 1, 0]]
