"""Held-out rows are never trained on, and training deals every row once per epoch in a seeded order that a
checkpoint can resume without skipping or repeating a row."""
import pytest

from rollart.config import ConfigError
from rollart.data.split import split_rows
from rollart.rollout.row_order import RowOrder


@pytest.mark.parametrize("n,heldout,k", [(100, 0.1, 10), (100, 0.0, 0), (7, 0.01, 1), (50, 5, 5)])
def test_split_is_disjoint_complete_and_sized(n, heldout, k):
    train, held = split_rows(n, heldout, seed=3)
    assert len(held) == k and not set(train) & set(held)
    assert sorted(train + held) == list(range(n))


def test_split_is_the_same_in_every_process_and_moves_with_the_seed():
    assert split_rows(200, 0.1, seed=1) == split_rows(200, 0.1, seed=1)
    assert split_rows(200, 0.1, seed=1)[1] != split_rows(200, 0.1, seed=2)[1]


@pytest.mark.parametrize("heldout", [-0.1, 1.5, 10])
def test_split_refuses_what_leaves_nothing_or_is_not_a_size(heldout):
    with pytest.raises(ConfigError):
        split_rows(10, heldout)


def test_every_row_once_per_epoch_in_new_orders():
    order = RowOrder(12, seed=5)
    epochs = [[order.next() for _ in range(12)] for _ in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(12))
    assert epochs[0] != epochs[1] != epochs[2]
    assert RowOrder(12, seed=6).next() != epochs[0][0] or RowOrder(12, seed=7).next() != epochs[0][0]


def test_restored_order_continues_where_it_stopped():
    order = RowOrder(10, seed=1)
    dealt = [order.next() for _ in range(13)]  # one epoch and three rows into the next
    for row in dealt:
        order.settle(row)  # every group trained
    resumed = RowOrder.restore(order.state())
    rest = [resumed.next() for _ in range(17)]
    uninterrupted = RowOrder(10, seed=1)
    assert dealt + rest == [uninterrupted.next() for _ in range(30)]


def test_no_rows_is_a_config_error():
    with pytest.raises(ConfigError):
        RowOrder(0)


def test_rows_not_trained_at_a_checkpoint_are_dealt_first_after_resume():
    order = RowOrder(10, seed=2)
    dealt = [order.next() for _ in range(6)]
    for row in dealt[:4]:  # four groups trained, two still in flight when the checkpoint is taken
        order.settle(row)
    resumed = RowOrder.restore(order.state())
    assert sorted(resumed.next() for _ in range(2)) == sorted(dealt[4:])
    rest = [resumed.next() for _ in range(4)]
    assert sorted(dealt + rest) == list(range(10))  # the epoch completes: no row skipped, none twice
    for row in dealt[4:] + rest:
        resumed.settle(row)
    assert sorted(resumed.trained_in(0)) == list(range(10)) and resumed.trained_in(1) == []


def test_a_failed_groups_row_is_dealt_again_next():
    order = RowOrder(5, seed=0)
    first, second = order.next(), order.next()
    order.give_back(first)
    assert order.next() == first
    assert order.outstanding == {first: [0], second: [0]}
    rest = [order.next() for _ in range(3)]
    assert sorted([first, second, *rest]) == list(range(5))


def test_env_tasks_and_agent_tasks_play_the_same_evaluation_seeds():
    """An agent task (rollart.gateway) has rows as a dataset task has: the scheduler and evaluation read both."""
    from rollart.gateway.agent_task import AgentTask
    from rollart.rollout.env_manager import TaskSpec

    async def agent(base_url, api_key, task):
        return 0.0

    for rows, expected in ((0, range(100, 105)), (3, range(3)), (8, range(5))):
        assert TaskSpec("t", "e", rows=rows).episode_seeds(5, 100) == expected
        assert AgentTask("a", agent, rows=rows).episode_seeds(5, 100) == expected
    with pytest.raises(ConfigError, match="rows >= 0"):
        AgentTask("a", agent, rows=-1)
