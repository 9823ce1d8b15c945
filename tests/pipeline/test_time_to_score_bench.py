"""tools/bench/time_to_score.py's pure parts: when a run reaches its target, censoring at the budget, median and
range over censored runs, the ratio's direction and bounds, the interleaved order."""
import argparse
import math

import pytest

from bench_modules import bench_module
from rollart.pipeline import PipelineConfig

tts = bench_module("time_to_score")


def test_target_needs_consecutive_evaluations():
    evals = [(5, 0.2), (10, 0.8), (15, 0.5), (20, 0.8), (25, 0.9)]
    elapsed = {5: 10.0, 10: 20.0, 15: 30.0, 20: 40.0, 25: 50.0}
    assert tts.time_to_target(evals, elapsed, 0.7, 1, 100.0).seconds == 20.0
    # the dip at step 15 breaks the first run: the second of two in a row is step 25
    assert tts.time_to_target(evals, elapsed, 0.7, 2, 100.0).seconds == 50.0
    assert tts.time_to_target(evals, elapsed, 0.95, 1, 100.0).censored
    with pytest.raises(ValueError):
        tts.time_to_target(evals, elapsed, 0.7, 0, 100.0)


def test_reached_past_the_budget_is_censored_at_the_budget():
    t = tts.time_to_target([(5, 1.0)], {5: 130.0}, 0.9, 1, 120.0)
    assert t.censored and t.value == 120.0


def test_median_and_range_with_censored_runs():
    T = tts.TimeToTarget
    s = tts.summarize([T(None, 100.0), T(40.0, 100.0), T(60.0, 100.0)])
    assert (s.median, s.median_censored, s.low, s.high, s.high_censored, s.censored) == (60.0, False, 40.0, 100.0,
                                                                                          True, 1)
    # a censored run sorts after a reached one even when its budget is shorter than that time
    s = tts.summarize([T(None, 50.0), T(90.0, 100.0), T(None, 50.0)])
    assert s.median == 50.0 and s.median_censored and s.low == 90.0
    s = tts.summarize([T(10.0, 100.0), T(30.0, 100.0), T(None, 100.0), T(20.0, 100.0)])
    assert s.median == 25.0 and not s.median_censored                       # even count: the middle two
    s = tts.summarize([T(10.0, 100.0), T(None, 100.0)])
    assert s.median == 55.0 and s.median_censored
    with pytest.raises(ValueError):
        tts.summarize([])


def test_ratio_is_baseline_over_rollart_with_its_bound():
    T = tts.TimeToTarget
    fast, slow = tts.summarize([T(50.0, 300.0)] * 3), tts.summarize([T(100.0, 300.0)] * 3)
    censored = tts.summarize([T(None, 300.0)] * 3)
    assert tts.tts_ratio(slow, fast) == (2.0, "exact")                     # > 1: rollart faster
    assert tts.tts_ratio(fast, slow) == (0.5, "exact")
    assert tts.tts_ratio(censored, fast) == (6.0, "lower")                 # baseline never got there: at least
    assert tts.tts_ratio(fast, censored) == (50.0 / 300.0, "upper")
    value, bound = tts.tts_ratio(censored, censored)
    assert math.isnan(value) and bound == "none"


def test_runs_rotate_over_seeds():
    modes = ["sync", "syncplus", "oneoff", "areal", "rollart", "rollart_a2"]
    orders = [tts.run_order(modes, s) for s in range(len(modes) + 1)]
    assert all(sorted(o) == sorted(modes) for o in orders)
    assert len({o[0] for o in orders[:-1]}) == len(modes) and orders[-1] == orders[0]  # each mode first once


def test_the_paper_profile_takes_fig3s_shares_and_table4s_transfers_relative_to_generation():
    tts_paper = bench_module("tts_paper")
    cal = tts_paper.derive(generation_s=5.4, train_1_s=23.0, trajectory_generation_s=2.7, turns=8.0,
                           moved_bytes=10**6, time_scale=8.0, real_over_emulated=0.3, steps=3)
    assert cal.trainer_devices == 10  # 23 s on one H800 -> 2.3 s, 23/54 of 5.4 s
    assert cal.env_mean_s * 9 == pytest.approx(2.7 * 15 / 54)  # a trajectory's 9 env calls: 15/54 of its generation
    pull_s = 10**6 / cal.link_bytes_per_s
    assert pull_s == pytest.approx(5.4 * 6.2 / (0.54 * 366.0))  # Table 4's pull against Fig. 3's generation
    assert 10**6 / cal.push_bytes_per_s == pytest.approx(5.4 * 32.4 / (0.54 * 366.0))  # and its push
    cfg = tts_paper.apply(PipelineConfig(), cal)
    assert (cfg.weight_link_bytes_per_s, cfg.weight_push_bytes_per_s) == (cal.link_bytes_per_s, cal.push_bytes_per_s)
    assert "trainer 10 x H800" in cal.line and "SIMULATED" in cal.line


def test_the_paper_profile_grows_the_time_scale_until_engine_and_trainer_fit_their_emulated_times():
    tts_paper = bench_module("tts_paper")
    assert tts_paper.growth(engine_ratio=0.2, real_train_s=0.1, generation_s=2.7) == 1.0  # both fit already
    assert tts_paper.growth(engine_ratio=1.0, real_train_s=0.1, generation_s=2.7) == pytest.approx(2.0)  # engine
    # a 1 s real train step against 23/54 of 1 s of generation, within half of it: the trainer sets the scale
    assert tts_paper.growth(engine_ratio=0.2, real_train_s=1.0, generation_s=1.0) == pytest.approx(54 / 23 / 0.5)
    assert tts_paper.growth(engine_ratio=0.2, real_train_s=1.0, generation_s=1.0, fit_trainer=False) == 1.0


def test_earlier_runs_join_only_with_the_same_settings_and_other_runs(tmp_path):
    import argparse
    import json
    args = argparse.Namespace(profile="paper", target=0.7, consecutive=2, eval_every=5, budget_s=600.0,
                              split_cores=True, set=["batch_groups=1"], warmup_steps=60, first_seed=1, seeds=2,
                              earlier=[])
    row = {"mode": "rollart", "seed": 0, "seconds": 422.0, "budget_s": 600.0}
    same = tmp_path / "same.json"
    same.write_text(json.dumps({"args": {**vars(args), "first_seed": 0, "seeds": 1}, "rows": [row]}))
    args.earlier = [str(same)]
    assert tts.earlier_rows(args, ["rollart"]) == [row]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"args": {**vars(args), "budget_s": 300.0}, "rows": [row]}))
    args.earlier = [str(other)]
    with pytest.raises(SystemExit, match=r"other.json: its runs used other settings \(budget_s=300.0, here 600.0\)"):
        tts.earlier_rows(args, ["rollart"])
    args.earlier = [str(same), str(same)]
    with pytest.raises(SystemExit, match=r"runs \(mode, seed\) \[\('rollart', 0\)\] are run here or in another"):
        tts.earlier_rows(args, ["rollart"])
    args.earlier, args.first_seed = [str(same)], 0  # other modes, the same seed
    assert tts.earlier_rows(args, ["sync", "rollart_a2"]) == [row]
    (tmp_path / "bad.json").write_text("{}")
    args.earlier = [str(tmp_path / "bad.json")]
    with pytest.raises(SystemExit, match="not a time_to_score.json of this bench"):
        tts.earlier_rows(args, ["rollart"])


def test_breakdown_gives_each_modes_medians_and_reads_runs_without_staleness():
    def row(mode, steps, s, lag=None, aborted=0):
        out = dict(mode=mode, steps=steps, s_per_step=s, aborted={"stale": aborted} if aborted else {})
        return out if lag is None else {**out, "staleness_token_mean": lag, "batch_wait_s": s / 2, "train_s": s / 4}
    rows = [row("rollart", 40, 2.0, 0.5, 3), row("rollart", 60, 2.2, 0.7, 9), row("rollart", 50, 2.1, 0.6, 5),
            row("areal", 45, 2.3)]  # a run recorded before staleness was
    line = tts.breakdown(rows, ["rollart", "areal", "oneoff"])
    assert "rollart 50 steps x 2.10 s (batch wait 1.05, train 0.53), staleness 0.60, aborted 5" in line
    assert "areal 45 steps x 2.30 s (batch wait -, train -), staleness -, aborted 0" in line
    assert "oneoff" not in line
    sync = tts.breakdown([{**row("syncplus", 60, 5.0, 0.0), "batch_wait_s": math.nan}], ["syncplus"])
    assert "syncplus 60 steps x 5.00 s (batch wait -, train 1.25), staleness 0.00, aborted 0" in sync


def test_the_last_line_reports_each_baselines_step_length_over_rollarts():
    def row(mode, seconds, s_per_step):
        return dict(mode=mode, seed=0, seconds=seconds, budget_s=600.0, censored=False, s_per_step=s_per_step)
    rows = [row("rollart", 100.0, 2.0), row("rollart", 300.0, 3.0), row("rollart", 200.0, 2.5),
            row("syncplus", 150.0, 5.0), row("areal", 400.0, 2.0)]
    args = argparse.Namespace(profile="cpu", target=0.7, consecutive=2, budget_s=600.0, quick=False)
    line = tts.final_line(rows, ["rollart", "syncplus", "areal"], args)
    # the judged ratios follow the times to target; the report, the steps' lengths (medians 5.0 and 2.0 over 2.5)
    assert "tts_vs_syncplus=0.75 " in line and "tts_vs_areal=2.00 " in line
    assert "step_vs_syncplus=2.00 " in line and "step_vs_areal=0.80 " in line
    assert "step_vs_oneoff" not in line
