"""rollart.actions.emulated: actions held to their emulated durations, outruns counted, and the pod baseline's
shared cores running on the emulated clock."""
import asyncio

import pytest

from rollart.actions.emulated import EmulatedClock, EmulatedExecution
from rollart.sim.actions_baselines import SharedCores


def test_a_short_real_action_lasts_its_emulated_time():
    async def main():
        emu = EmulatedExecution(scale=0.01)  # 1 emulated s = 10 ms
        t0 = emu.clock.now
        result = await emu.hold(asyncio.sleep(0, result="done"), emu.clock.sleep(5.0))
        return result, emu.clock.now - t0, emu
    result, took, emu = asyncio.run(main())
    assert result == "done" and 5.0 <= took < 8.0
    assert (emu.actions, emu.outruns, emu.excess_s) == (1, 0, 0.0)


def test_real_work_longer_than_its_emulated_time_is_counted_as_an_outrun():
    async def main():
        emu = EmulatedExecution(scale=0.01)
        await emu.hold(asyncio.sleep(0.05), emu.clock.sleep(1.0))  # 5 emulated s of real work, 1 s emulated
        return emu
    emu = asyncio.run(main())
    assert emu.outruns == 1 and 3.5 < emu.excess_s < 8.0


def test_a_failing_real_action_raises_and_cancels_its_timer():
    async def main():
        emu = EmulatedExecution(scale=0.01)

        async def boom():
            raise RuntimeError("sandbox died")
        with pytest.raises(RuntimeError, match="sandbox died"):
            await emu.hold(boom(), emu.clock.sleep(100.0))
        return emu
    assert asyncio.run(main()).actions == 0


def test_commands_sharing_one_emulated_core_take_twice_as_long():
    """SharedCores (the pod baseline's CFS model) on the emulated clock: two 2-s commands on one core both end
    at 4 s; alone, one ends at 2 s."""
    async def main():
        emu = EmulatedExecution(scale=0.01)
        core = SharedCores(emu.clock, 1, cap=1.0)
        t0 = emu.clock.now
        await emu.hold(asyncio.sleep(0), emu.shared(core, 2.0))
        alone = emu.clock.now - t0
        t1 = emu.clock.now
        await asyncio.gather(*(emu.hold(asyncio.sleep(0), emu.shared(core, 2.0)) for _ in range(2)))
        return alone, emu.clock.now - t1
    alone, shared = asyncio.run(main())
    assert 2.0 <= alone < 3.0 and 4.0 <= shared < 5.5


def test_the_scale_must_be_positive():
    with pytest.raises(ValueError, match="scale"):
        EmulatedClock(0)
