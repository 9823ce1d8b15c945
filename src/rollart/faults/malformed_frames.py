"""The wire fault: a rogue peer (:mod:`rollart.faults.frames`) floods the actor socket of a short real run with
malformed frames. The run must still train every step after them, and its frame ledger must add up: every frame
sent is counted by the coordinator, as rejected (by what was wrong) or as accepted (a HELLO that joined)."""
from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from rollart.faults.figures import Figure, ended, failed, steps_done
from rollart.faults.harness import Harness
from rollart.faults.procs import actor_processes

FRAMES = 10_000
"""Malformed frames sent to the run's actor socket."""


def frame_ledger(sent: int, rejected: dict[str, int], accepted: int) -> tuple[int, str]:
    """(uncounted, one line): ``sent = rejected (by reason) + accepted + uncounted``; uncounted below 0 means the
    coordinator counted more than the rogue sent (another peer's frames among them)."""
    n = sum(rejected.values())
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(rejected.items(), key=lambda kv: -kv[1])) or "none"
    uncounted = sent - n - accepted
    return uncounted, f"sent {sent} = rejected {n} ({reasons}) + accepted {accepted} + uncounted {uncounted}"


async def malformed_frames(h: Harness) -> list[Figure]:
    """10,000 malformed frames from a rogue peer on the run's actor socket at step 1: survived=N when the run
    took all N and still trained every step after them; uncounted=0 when the coordinator counted every one."""
    cfg = h.config("malformed_frames")
    state: dict = {"sent": 0, "done": False, "step_done": None, "kinds": {}}

    async def start_flood(coordinator) -> str:
        procs = actor_processes()
        endpoint = next((p.endpoint for p in procs if p.endpoint), "")
        if not endpoint:
            raise RuntimeError("no actor process shows the coordinator's endpoint")
        system = coordinator.parts.actors.system
        state.update(system=system, before=Counter(system.rejections), actors_before=len(system.actors))
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rollart.faults.frames", endpoint, "--count", str(FRAMES), "--seed", "0",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)

        async def follow() -> None:
            async for line in flood.stdout:
                word, _, rest = line.decode().strip().partition(" ")
                if word == "kinds":
                    state["kinds"] = json.loads(rest)
                    continue
                state["sent"] = int(rest or 0)
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
    kinds = ", ".join(f"{k} {v}" for k, v in state["kinds"].items())
    rejected = dict(Counter(out.system_rejections) - state.get("before", Counter()))
    # a HELLO that joined as an actor is the one way a stranger's frame is accepted (the run has no remote actors)
    accepted = len(state["system"].actors) - state["actors_before"] if "system" in state else 0
    uncounted, ledger = frame_ledger(sent, rejected, accepted)
    what = (f"{'; '.join(out.events) or 'the flood never started'}; {sent} sent ({kinds or 'none'}); "
            f"{steps_done(out, cfg.total_steps)}")
    if not state["done"]:
        why = "the flood did not complete" if out.completed else ended(out)
        return [failed(name, why, f"{what}; {out.error}", out.seconds)
                for name in ("malformed_frames_survived", "malformed_frames_uncounted")]
    counted = Figure("malformed_frames_uncounted", str(uncounted), uncounted == 0, f"{ledger} (by the coordinator)",
                     out.seconds, {"sent": sent, "rejected": rejected, "accepted": accepted, "uncounted": uncounted})
    if not out.completed:
        return [failed("malformed_frames_survived", ended(out), f"{what}; {ended(out)}", out.seconds), counted]
    after = out.steps - (state["step_done"] or 0)
    if after < 1:
        return [failed("malformed_frames_survived", "no step trained after the flood", what, out.seconds), counted]
    return [Figure("malformed_frames_survived", str(sent), sent == FRAMES,
                   f"{what}; {after} steps trained after the last frame", out.seconds, {"sent": sent}), counted]
