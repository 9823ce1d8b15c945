"""The checkpoint fault: the newest checkpoint of a short real run is cut short on disk, then the run resumes. It
must find the damage (checksums) and fall back to the older, intact checkpoint instead of loading a broken one."""
from __future__ import annotations

from rollart.faults.figures import Figure, ended, failed, steps_done
from rollart.faults.harness import Harness


async def corrupt_ckpt(h: Harness) -> list[Figure]:
    """Train 4 steps (checkpoints at steps 2 and 4), cut the newest checkpoint's largest file in half (the
    optimizer state, for the tiny model; any file of a checkpoint must be verified), then ``--resume`` to 6
    steps: fallback=1 when the run resumes from the intact step-2 checkpoint and trains 4 steps."""
    base_steps, total = 4, h.steps
    first = await h.drive(h.config("corrupt_ckpt", total_steps=base_steps))
    root = h.workdir / "corrupt_ckpt" / "checkpoints"
    ckpts = sorted(p for p in root.glob("step_*") if p.is_dir())
    if not first.completed or len(ckpts) < 2:
        return [failed("corrupt_ckpt_fallback", "the base run left no two checkpoints",
                       f"base run: {steps_done(first, base_steps)}, checkpoints {[p.name for p in ckpts]}; "
                       f"{first.error}", first.seconds)]
    newest, older = ckpts[-1], ckpts[-2]
    victim = max((p for p in newest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    size = victim.stat().st_size
    with open(victim, "r+b") as f:
        f.truncate(size // 2)
    older_step = int(older.name.split("_")[1])
    out = await h.drive(h.config("corrupt_ckpt", fresh=False, resume=True, total_steps=total))
    trained = len(out.result.history) if out.completed else None
    what = (f"truncated {victim.relative_to(root)} ({size} -> {size // 2} bytes), then --resume to {total} steps; "
            f"the intact {older.name} is beside it")
    seconds = first.seconds + out.seconds
    if not out.completed:
        return [Figure("corrupt_ckpt_fallback", "0", False, f"{what}; the resume ended: {ended(out)}", seconds)]
    if trained != total - older_step:
        return [Figure("corrupt_ckpt_fallback", "0", False, f"{what}; it trained {trained} steps, not the "
                       f"{total - older_step} of a resume from {older.name}: it did not fall back", seconds)]
    return [Figure("corrupt_ckpt_fallback", "1", True, f"{what}; resumed from {older.name} and trained {trained} "
                   f"steps to version {out.result.version}", seconds)]
