"""Covers rollart.versions: staleness of tokens, trajectories and tensors measured one way, and version spans."""
import torch

from rollart.types import Trajectory
from rollart.versions import oldest_version, staleness, staleness_values, version_span


def _traj(versions, start_version=0):
    n = len(versions)
    return Trajectory(trajectory_id="t", group_id="g", task="x", token_ids=[1] * (n + 1),
                      loss_mask=[0] + [1] * n, logprobs=[0.0] * (n + 1), versions=[-1] + versions,
                      start_version=start_version)


def test_staleness_per_token_and_per_trajectory():
    t = _traj([2, 3, 5])
    assert staleness_values([t], 5, per_token=True) == [3, 2, 0]
    assert staleness_values([t], 5) == [3]


def test_staleness_is_never_negative_on_ints_and_tensors():
    assert staleness(4, 6) == 0 and staleness(6, 4) == 2
    got = staleness(5, torch.tensor([[-1, 3, 5, 7]]))
    assert got.tolist() == [[6, 2, 0, 0]] and got.dtype == torch.long


def test_oldest_version_and_span_look_at_trained_tokens_only():
    t = _traj([4, 2, 3])
    assert oldest_version(t) == 2 and version_span(t) == 2
    empty = _traj([], start_version=7)
    assert oldest_version(empty) == 7 and version_span(empty) == 0
