"""PD disaggregation vs colocated generation, and the K/V hand-over against raw actor-runtime bulk throughput.

    python tools/bench/pd.py --quick    # < 60 s on 2 cores
    python tools/bench/pd.py            # more requests, more rounds

Both setups run two inference-worker processes (one torch thread each) on a random-init model, behind an
LLMProxy in this process, on one mixed long-prompt workload sent all at once (a quarter long prompts, the rest
short; greedy, fixed lengths):
* colocated: each worker prefills and decodes whole requests (the proxy spreads them);
* PD: worker H800 prefills (and samples the first token), worker H20 decodes; each prompt's K/V travels
  back to the proxy and on to the decode worker as one zero-copy frame (``rollart.inference.pd``).
``pd_vs_colocated`` = colocated wall time / PD wall time (> 1: PD finished the workload sooner); outputs are
checked token for token against the colocated run.

K/V hand-over vs bulk: the hand-over of one long prompt's K/V costs the prefill engine's export (copy of
its blocks into one buffer), the actor-runtime hop, and the decode engine's install (copy into its blocks).
Per round, the PD run's prefill worker exports it and its decode worker installs it (times from the
engines' own counters), and the real exported ``KVBlocks`` is sent to a sink actor process, interleaved with
a raw bulk send of a uint8 tensor of the same size to the same sink (the actor runtime's bulk path, as
tools/bench/actor_rpc.py measures it); medians over the rounds. In the proxy
path the K/V makes two such hops (prefill worker -> proxy -> decode worker); the figure is per hop.
``kv_transfer_gbps`` = bytes / (export + hop + install); ``bulk_gbps`` = bytes / raw hop;
``kv_vs_bulk`` = their ratio (target >= 0.7). Writes tools/bench/plots/pd.png.
Last line: pd_vs_colocated=... kv_transfer_gbps=... bulk_gbps=... kv_vs_bulk=... (key=value).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from rollart.messages import GetStats

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = "rollart.inference.worker:InferenceWorker"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class KVSink:
    """The receiving end of the hop measurement: decodes what it is sent and answers its size."""

    def ack(self, payload) -> int:
        data = payload.data if hasattr(payload, "data") else payload
        return int(data.numel() * data.element_size())


def workload(n: int, long_len: int, short_len: int, seed: int = 0) -> list[list[int]]:
    import random
    rng = random.Random(seed)
    lengths = [long_len if i % 4 == 0 else short_len for i in range(n)]
    return [[rng.randrange(3, 500) for _ in range(n_tok)] for n_tok in lengths]


async def run_workload(system, model: str, prompts, max_tokens: int, pd: bool) -> tuple[float, list, dict, list]:
    from rollart.rollout.proxy import LLMProxy
    from rollart.rollout.proxy_config import ProxyConfig
    from rollart.types import SamplingParams

    engine = dict(model=model, num_kv_blocks=1024, max_num_seqs=64, max_num_batched_tokens=1024)
    names = ("H800", "H20")
    handles = [await system.spawn(WORKER, engine, name=f"{'pd' if pd else 'co'}-{c}", hw_class=c, env=ONE_THREAD)
               for c in names]
    cfg = ProxyConfig(pd_prefill_class="H800", pd_decode_class="H20", pd_kv_transport="frames") if pd else ProxyConfig()
    proxy = LLMProxy([(f"w-{c}", c, h) for c, h in zip(names, handles)], cfg)
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    await proxy.generate("warm", prompts[1][:8], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(proxy.generate(f"t{i}", p, params) for i, p in enumerate(prompts)))
    wall = time.perf_counter() - t0
    stats = {c: await h.send(GetStats()) for c, h in zip(names, handles)}
    stats["engine"] = {c: await h.call("engine_stats") for c, h in zip(names, handles)}
    stats["proxy"] = dict(proxy.counters)
    return wall, [o.token_ids for o in outs], stats, handles


async def handover_times(system, prefill, decode, prompt: list[int], rounds: int):
    """Per round, one long prompt's K/V: the prefill engine's export, the decode engine's install (their own
    counters) and the actor hop of that KVBlocks, interleaved with a raw hop of a tensor of the same size."""
    import torch

    from rollart.types import GenerateRequest, SamplingParams
    sink = await system.spawn("pd:KVSink", name="kv-sink", env={**ONE_THREAD, "PYTHONPATH": _pythonpath()})
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    raw = None
    res = {"export": [], "install": [], "hop": [], "raw": []}
    for r in range(rounds + 1):                                           # round 0 warms every path
        before_p, before_d = await prefill.call("engine_stats"), await decode.call("engine_stats")
        first = await prefill.send(GenerateRequest(f"p{r}", prompt, one, export_kv="frames"))
        kv = first.kv
        await decode.send(GenerateRequest(f"d{r}", prompt + first.token_ids, one, kv=kv))
        after_p, after_d = await prefill.call("engine_stats"), await decode.call("engine_stats")
        if raw is None:
            raw = torch.empty(kv.nbytes, dtype=torch.uint8).random_()
        hops = {}
        for name in (("raw", "kv") if r % 2 else ("kv", "raw")):         # alternate which goes first
            t = time.perf_counter()
            assert await sink.ack(raw if name == "raw" else kv) == kv.nbytes
            hops[name] = time.perf_counter() - t
        t_raw, t_kv = hops["raw"], hops["kv"]
        if r:
            res["export"].append(after_p["kv_export_s"] - before_p["kv_export_s"])
            res["install"].append(after_d["kv_install_s"] - before_d["kv_install_s"])
            res["hop"].append(t_kv)
            res["raw"].append(t_raw)
    return kv.nbytes, {k: statistics.median(v) for k, v in res.items()}


def _pythonpath() -> str:
    return os.pathsep.join([HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def plot(walls: dict, gbps: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.bar(list(walls), list(walls.values()), color=["#999999", "#3a7dc9"])
    a.set_title("mixed long-prompt workload: wall time (s, lower is better)", fontsize=9)
    b.bar(list(gbps), list(gbps.values()), color=["#999999", "#3a7dc9"])
    b.set_title("K/V hand-over vs raw actor bulk (GB/s per hop)", fontsize=9)
    for ax, vals in ((a, walls), (b, gbps)):
        for i, v in enumerate(vals.values()):
            ax.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def main(args: argparse.Namespace) -> None:
    from rollart.actors import ActorSystem
    from rollart.tools.make_tiny_model import make_tiny_model

    n, long_len, short_len, max_tokens, rounds = (8, 512, 24, 24, 15) if args.quick else (32, 1024, 48, 64, 21)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_tiny_model(os.path.join(tmp, "m"), hidden=256, layers=4, heads=4, kv_heads=4,
                                    intermediate=768, seed=0, init_std=0.2))
        prompts = workload(n, long_len, short_len)
        async with ActorSystem() as system:
            co_wall, co_out, _, _ = await run_workload(system, model, prompts, max_tokens, pd=False)
            pd_wall, pd_out, pd_stats, (prefill, decode) = await run_workload(system, model, prompts, max_tokens, pd=True)
            nbytes, t = await handover_times(system, prefill, decode, prompts[0], rounds)
    if pd_out != co_out:
        raise SystemExit("PD output differs from colocated generation: the K/V hand-over is broken")
    decode = pd_stats["engine"]["H20"]
    moved = pd_stats["proxy"]["pd_kv_bytes"]
    kv_s = t["export"] + t["hop"] + t["install"]
    kv_gbps, bulk_gbps = nbytes / kv_s / 1e9, nbytes / t["raw"] / 1e9
    ratio = co_wall / pd_wall
    print(f"workload: {n} requests ({n // 4} x {long_len} + {n - n // 4} x {short_len} prompt tokens), "
          f"{max_tokens} new tokens each, 2 worker processes")
    print(f"colocated {co_wall:.2f} s, PD {pd_wall:.2f} s (outputs identical); decode worker computed "
          f"{decode['computed_prompt_tokens']} prompt tokens, received {decode['imported_kv_tokens']} as K/V "
          f"({moved / 1e6:.1f} MB), re-prefilled {pd_stats['proxy']['pd_reprefill_tokens']}")
    print(f"one long prompt's K/V ({nbytes / 1e6:.2f} MB), medians of {rounds}: export {t['export'] * 1e3:.2f} ms, "
          f"hop {t['hop'] * 1e3:.2f} ms, install {t['install'] * 1e3:.2f} ms; raw bulk hop {t['raw'] * 1e3:.2f} ms")
    plot({"colocated": co_wall, "PD": pd_wall}, {"raw bulk": bulk_gbps, "K/V hand-over": kv_gbps},
         os.path.join(HERE, "plots", "pd.png"))
    print(f"pd_vs_colocated={ratio:.2f} kv_transfer_gbps={kv_gbps:.2f} bulk_gbps={bulk_gbps:.2f} "
          f"kv_vs_bulk={kv_gbps / bulk_gbps:.2f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter requests; < 60 s")
    sys.path.insert(0, HERE)
    asyncio.run(main(p.parse_args()))
