"""The wire fault: a rogue peer (:mod:`rollart.faults.frames`) floods the actor socket of a short real run with
malformed frames. The run must reject every one and still train every step after them."""
from __future__ import annotations

import asyncio
import sys

from rollart.faults.figures import Figure, ended, failed, steps_done
from rollart.faults.harness import Harness
from rollart.faults.procs import actor_processes

FRAMES = 10_000
"""Malformed frames sent to the run's actor socket."""


async def malformed_frames(h: Harness) -> list[Figure]:
    """10,000 malformed frames from a rogue peer on the run's actor socket at step 1: survived=N when the run
    took all N and still trained every step after them."""
    cfg = h.config("malformed_frames")
    state: dict = {"sent": 0, "done": False, "step_done": None}

    async def start_flood(coordinator) -> str:
        procs = actor_processes()
        endpoint = next((p.endpoint for p in procs if p.endpoint), "")
        if not endpoint:
            raise RuntimeError("no actor process shows the coordinator's endpoint")
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rollart.faults.frames", endpoint, "--count", str(FRAMES), "--seed", "0",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)

        async def follow() -> None:
            async for line in flood.stdout:
                word, _, n = line.decode().partition(" ")
                state["sent"] = int(n or 0)
                if word == "done":
                    state["done"] = True
                    state["step_done"] = coordinator.step
            await flood.wait()

        state["task"] = asyncio.create_task(follow())
        state["proc"] = flood
        return f"rogue peer sends {FRAMES} malformed frames to {endpoint}"

    out = await h.drive(cfg, hooks=[(1, start_flood)])
    if "task" in state:
        try:
            await asyncio.wait_for(state["task"], 60)
        except TimeoutError:
            state["proc"].kill()
            await state["proc"].wait()
    sent = state["sent"]
    rejected = f"; the coordinator counted {out.system_rejected} rejected frames" \
        if out.system_rejected is not None else ""
    what = (f"{'; '.join(out.events) or 'the flood never started'}; {sent} sent{rejected}; "
            f"{steps_done(out, cfg.total_steps)}")
    if not state["done"]:
        return [failed("malformed_frames_survived", "the flood did not complete" if out.completed else ended(out),
                       f"{what}; {out.error}", out.seconds)]
    if not out.completed:
        return [failed("malformed_frames_survived", ended(out), f"{what}; {ended(out)}", out.seconds)]
    after = out.steps - (state["step_done"] or 0)
    if after < 1:
        return [failed("malformed_frames_survived", "no step trained after the flood", what, out.seconds)]
    return [Figure("malformed_frames_survived", str(sent), sent == FRAMES,
                   f"{what}; {after} steps trained after the last frame", out.seconds, {"sent": sent})]
