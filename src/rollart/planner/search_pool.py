"""The processes one SHA-EA search spreads over: each round's task groupings run in this process, or (with more
than one worker, where the platform can fork) in forked worker processes that inherit the search — its context,
caches and deadline — and send back the arms they kept with what they counted. The search's own totals
(evaluations, the best cost and when it was first reached, a cap hit) are merged here. The search object is any
with ``workers``, ``deadline``, ``evaluated``, ``best_cost``, ``best_found_s``, ``cap_hit`` and
``grouping_rounds(arms, b_m, n_arms)`` (``rollart.planner.search.SHAEA``)."""
from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any


class GroupingPool:
    """One search's workers for the length of its run (a context manager): ``grouping_rounds`` runs a round.
    ``workers`` processes (0: one per CPU this process may use), no more than the ``groupings`` of the first
    round; the number it runs is set as ``search.workers``."""

    def __init__(self, search: Any, workers: int, groupings: int):
        self.search = search
        self.pool: ProcessPoolExecutor | None = None
        search.workers = min(workers or len(os.sched_getaffinity(0)), groupings)
        if search.workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            self.pool = ProcessPoolExecutor(search.workers, mp_context=multiprocessing.get_context("fork"),
                                            initializer=_adopt, initargs=(search,))
        else:
            search.workers = 1

    def __enter__(self) -> "GroupingPool":
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def grouping_rounds(self, jobs: list[tuple[tuple, list]], b_m: int, n_arms: int) -> dict:
        s = self.search
        if self.pool is None:
            return {tg: s.grouping_rounds(arms, b_m, n_arms) for tg, arms in jobs}
        futures = [(tg, self.pool.submit(_grouping_rounds, arms, b_m, n_arms)) for tg, arms in jobs]
        kept = {}
        for tg, future in futures:
            # every worker stops evolving at the deadline; the slack covers one last evaluation and the reply
            left = max(0.0, s.deadline - time.monotonic())
            kept[tg], evaluated, best_cost, best_found_s, cap_hit = future.result(timeout=left + 60.0)
            s.evaluated += evaluated
            s.cap_hit = s.cap_hit or cap_hit
            if best_cost < s.best_cost or (best_cost == s.best_cost and best_found_s < s.best_found_s):
                s.best_cost, s.best_found_s = best_cost, best_found_s
        return kept


_SEARCH: Any = None  # a worker process's inherited copy of the search


def _adopt(search: Any) -> None:
    global _SEARCH
    _SEARCH = search


def _grouping_rounds(arms: list, b_m: int, n_arms: int):
    """In a worker: one task grouping's level-2 rounds, with the evaluations this call made and the worker's
    best cost so far and when it first reached it (in seconds from the search's start)."""
    s = _SEARCH
    before = s.evaluated
    kept = s.grouping_rounds(arms, b_m, n_arms)
    return kept, s.evaluated - before, s.best_cost, s.best_found_s, s.cap_hit
