"""Covers the weight plane's GPU side: device buckets through pinned host frames back onto a device, CUDA IPC
between two processes, and the one-line fallback to copies where IPC cannot be used (GPU tests marked cuda)."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from rollart.weightplane import WeightRelay, WeightSource, WeightTransferError
from rollart.weightplane.cuda import import_ipc

no_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible here)")


def _named(device):
    g = torch.Generator().manual_seed(0)
    return [(f"l{i}.w", torch.randn(256, 128, generator=g).to(torch.bfloat16).to(device)) for i in range(6)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer where no GPU is visible")
def test_an_ipc_descriptor_is_refused_in_one_line_without_a_gpu():
    with pytest.raises(WeightTransferError, match="no CUDA device visible"):
        import_ipc({"uuid": "GPU-0"})


@pytest.mark.cuda
@no_gpu
async def test_device_buckets_go_through_pinned_frames_onto_the_device():
    named = _named("cuda")
    src, worker = WeightSource(), WeightRelay(device="cuda")
    await src.start()
    await worker.start()
    try:
        worker.pull(1, [src.address])
        await src.publish(1, named, 64 << 10)
        bucket, stats = await worker.take(1)
        assert stats.num_buckets > 1 and not any(k.startswith("ipc:") for k in stats.by_source)
        for name, t in named:
            got = bucket.tensors[name]
            assert got.is_cuda and got.dtype == torch.bfloat16 and torch.equal(got, t)
    finally:
        await worker.close()
        await src.close()


_PRODUCER = textwrap.dedent("""
    import asyncio, sys, torch
    from rollart.weightplane import WeightSource

    async def main():
        g = torch.Generator().manual_seed(0)
        named = [(f"l{i}.w", torch.randn(256, 128, generator=g).to(torch.bfloat16).cuda()) for i in range(6)]
        src = WeightSource()
        await src.start()
        await src.publish(1, named, 64 << 10, ipc=sys.argv[1] == "ipc")
        print(src.address, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # serve until stdin closes
        await src.close()

    asyncio.run(main())
""")


async def _from_producer(mode):
    proc = subprocess.Popen([sys.executable, "-c", _PRODUCER, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    try:
        address = proc.stdout.readline().strip()
        worker = WeightRelay(device="cuda", timeout_s=10.0)
        await worker.start()
        try:
            worker.pull(1, [address], ipc_source=address)
            return (*await worker.take(1), worker.cuda_ipc)
        finally:
            await worker.close()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.cuda
@no_gpu
async def test_cuda_ipc_between_two_processes_gives_the_trainers_exact_weights():
    bucket, stats, still_on = await _from_producer("ipc")
    assert still_on and all(k.startswith("ipc:") for k in stats.by_source)
    for name, t in _named("cuda"):
        assert torch.equal(bucket.tensors[name], t)


@pytest.mark.cuda
@no_gpu
async def test_without_ipc_buckets_the_worker_says_so_once_and_copies(caplog):
    caplog.set_level(logging.WARNING, "rollart.weightplane")
    bucket, stats, still_on = await _from_producer("copy")
    assert not still_on and not any(k.startswith("ipc:") for k in stats.by_source)
    assert sum("weights.cuda_ipc" in r.message for r in caplog.records) == 1
    for name, t in _named("cuda"):
        assert torch.equal(bucket.tensors[name], t)
