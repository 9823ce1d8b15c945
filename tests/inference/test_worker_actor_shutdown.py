"""InferenceWorker as an in-process actor: generate calls cancelled before they start leave no unawaited coroutine at shutdown."""
import asyncio
import gc
import warnings

from rollart.actors import ActorSystem
from rollart.types import GenerateRequest, SamplingParams
from rollart.messages import GetStats


async def test_generate_cancelled_in_the_same_drain_is_not_left_unawaited(engine_config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
            worker = await system.spawn("rollart.inference.worker:InferenceWorker", engine_config,
                                        mode="inprocess", name="w0")
            for i in range(4):
                task = asyncio.ensure_future(worker.send(GenerateRequest(f"early-{i}", [5, 6, 7],
                                                                                  SamplingParams(max_tokens=4))))
                await asyncio.sleep(0)  # its Call is sent, not yet read by the actor
                task.cancel()           # the Cancel lands in the same drain
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            done = await worker.send(GenerateRequest("late", [5, 6, 7], SamplingParams(
                temperature=0.0, max_tokens=3, ignore_eos=True)))
            assert done.finish_reason == "length" and len(done.token_ids) == 3
            stats = await worker.send(GetStats())
            assert stats["requests"] == 1 and stats["running"] == 0  # the cancelled ones never reached it
        gc.collect()  # shutdown is where the orphaned coroutines used to be reported
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert unawaited == []
