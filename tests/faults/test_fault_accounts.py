"""The fault suite's bookkeeping: lost / rolled-back / unscored accounting, the frame ledger, the summary line,
fault selection, and the sandbox report read from a junit file — each able to show a failure."""
import json

import pytest

from rollart.faults.cli import select
from rollart.faults.figures import Figure, failed, not_available, summary
from rollart.faults.ledger import account, read_ledger
from rollart.faults.malformed_frames import frame_ledger
from rollart.faults.sandbox_suite import parse_junit

BUFFER = {"accepted": 48, "trained": 32, "buffered": 8, "evicted": 8, "evicted/stale": 8}


def train(pid, version, ids, reward=1.0):
    return {"pid": pid, "event": "train", "version": version, "ids": ids, "rewards": [reward] * len(ids)}


def test_everything_accounted_reads_zero_lost():
    ids = [f"t{i}" for i in range(32)]
    a = account(BUFFER, [train(1, 1, ids[:16]), train(1, 2, ids[16:])], {i: 1.0 for i in ids})
    assert (a.lost, a.overcounted, a.unscored, a.trained_twice, a.trained) == (0, 0, 0, 0, 32)
    assert "lost 0" in a.describe()


def test_a_batch_that_never_reached_the_trainer_is_lost():
    ids = [f"t{i}" for i in range(32)]
    a = account(BUFFER, [train(1, 1, ids[:16])], None)  # the buffer handed out 32, the trainer trained 16
    assert a.lost == 16 and a.trained_by_buffer == 32
    assert "lost 16" in a.describe()


def test_rollback_duplicates_and_wrong_rewards_are_counted():
    ids = [f"t{i}" for i in range(24)]
    ledger = [train(1, 1, ids[:8]), train(1, 2, ids[8:16]), train(1, 3, ids[16:]),
              {"pid": 2, "event": "start", "version": 0}, {"pid": 2, "event": "load", "version": 2},
              train(2, 3, ids[16:], reward=0.5)]
    scores = {i: 1.0 for i in ids}
    a = account({"accepted": 24, "trained": 24}, ledger, scores)
    assert a.rolled_back == 8 and a.trained_twice == 8 and a.trainer_pids == [1, 2]
    assert a.unscored == 8  # retrained with a reward the reward function never gave
    assert a.lost == 0


def test_ledger_skips_a_line_cut_by_a_kill(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(train(1, 1, ["a"])) + "\n" + '{"pid": 1, "event": "tr')
    assert [r["ids"] for r in read_ledger(path)] == [["a"]]
    assert read_ledger(tmp_path / "missing.jsonl") == []


def test_frame_ledger_adds_up_or_says_how_many_went_uncounted():
    assert frame_ledger(10, {"bad_body": 2, "unsolicited_reply": 7}, 1) == (
        0, "sent 10 = rejected 9 (unsolicited_reply 7, bad_body 2) + accepted 1 + uncounted 0")
    assert frame_ledger(10, {"bad_body": 7}, 0)[0] == 3  # dropped without a count
    assert frame_ledger(10, {"bad_body": 11}, 0)[0] == -1  # another peer's frames among them
    assert frame_ledger(0, {}, 0) == (0, "sent 0 = rejected 0 (none) + accepted 0 + uncounted 0")


def test_summary_line_and_failure_values():
    figs = [Figure("env_exc_lost", "0", True), failed("trainer_kill_resumed", "ActorDeadError: actor (x) is dead"),
            not_available("sandbox_contained", "no isolation mode ran: bwrap skipped")]
    line = summary(figs)
    assert line == ("env_exc_lost=0 trainer_kill_resumed=fail(ActorDeadError:-actor-x-is-dead) "
                    "sandbox_contained=n/a(no-isolation-mode-ran:-bwrap-skipped)")
    assert all(" " not in item.split("=", 1)[1] for item in line.split(" "))
    assert figs[0].line().startswith("ok ") and figs[1].line().startswith("FAIL") and figs[2].line().startswith("n/a")


def test_select_faults_by_fault_or_figure_name():
    assert select([], quick=True) == ["env_exc", "env_hang", "sandbox"]
    assert select(["sandbox_contained,env_exc", "trainer_kill"], quick=False) == ["env_exc", "trainer_kill", "sandbox"]
    with pytest.raises(SystemExit, match="--only nope: no such fault; choose from env_exc"):
        select(["nope"], quick=False)


def test_sandbox_report_counts_contained_escaped_and_skipped(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text("""<testsuites><testsuite>
      <testcase classname="tests.sandbox.test_security" name="test_hostile_command_contained[bwrap-read_shadow]"/>
      <testcase classname="tests.sandbox.test_security" name="test_hostile_command_contained[bwrap-fill_dev_shm]">
        <failure message="leaked"/></testcase>
      <testcase classname="tests.sandbox.test_security" name="test_hostile_command_contained[unshare-read_shadow]">
        <skipped message="mode=unshare unavailable here: no userns"/></testcase>
      <testcase classname="tests.sandbox.test_security" name="test_suite_has_at_least_30_cases"/>
    </testsuite></testsuites>""")
    report = parse_junit(junit)
    assert report.total == 2 and report.contained["bwrap"] == 1 and report.escaped == {"bwrap": ["fill_dev_shm"]}
    assert report.skipped == {"unshare": "mode=unshare unavailable here: no userns"}
    assert "bwrap 1/2 (escaped: fill_dev_shm)" in report.describe()
