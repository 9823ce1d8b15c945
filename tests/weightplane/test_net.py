"""Covers the weight plane beyond loopback: trainer -> store -> 2 workers on this machine's routable IP with the
run's CURVE keys move the exact weights; a client without the keys gets nothing; a plain non-loopback bind is refused."""
import asyncio
import os
import socket
import subprocess
import sys

import pytest
import torch

from rollart.actors.curve import COORDINATOR_VAR, CURVE_DIR_VAR, is_loopback
from rollart.weightplane import BucketServer, PlaneNet, WeightRelay, WeightSource, WeightTransferError, pull_version
from rollart.weightplane.net import plane_net

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def routable_ip() -> str:
    """An IP of this machine other nodes could reach (the one on its default route), or skip."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9))  # no packet is sent: this only picks the route
            ip = s.getsockname()[0]
    except OSError as e:
        pytest.skip(f"this machine has no route beyond loopback ({e})")
    if is_loopback(f"tcp://{ip}:0"):
        pytest.skip("this machine has no non-loopback IP to bind")
    return ip


def make_keys(outdir) -> str:
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "curve_keys.py"), str(outdir)], check=True,
                   capture_output=True)
    return str(outdir)


def _named(n=10):
    g = torch.Generator().manual_seed(1)
    return [(f"layer{i}.weight", torch.randn(64, 40, generator=g)) for i in range(n)] + [
        ("norm.weight", torch.randn(40, generator=g).to(torch.bfloat16))]


async def test_chain_on_a_routable_ip_with_curve_moves_exact_weights_and_refuses_a_keyless_client(tmp_path):
    ip = routable_ip()
    net = PlaneNet(ip, make_keys(tmp_path / "keys"))
    named = _named()
    src, store = WeightSource(net=net), WeightRelay(stage=False, net=net)
    workers = [WeightRelay(net=net, timeout_s=10) for _ in range(2)]
    for x in (src, store, *workers):
        await x.start()
    try:
        for x in (src, store, *workers):
            assert x.address.startswith(f"tcp://{ip}:"), x.address
        pub = asyncio.ensure_future(src.publish(1, named, 8 << 10))
        store.pull(1, [src.address])
        workers[0].pull(1, [store.address])
        workers[1].pull(1, [workers[0].address, store.address])
        await pub
        await store.take(1)
        for w in workers:
            bucket, stats = await w.take(1)
            assert stats.retries == 0 and bucket.version == 1
            for name, t in named:
                assert bucket.tensors[name].dtype == t.dtype and torch.equal(bucket.tensors[name], t), name

        # a client with no keys (plain TCP) and one with a keypair the run never authorized get nothing
        stranger = PlaneNet(ip, make_keys(tmp_path / "stranger"))
        (tmp_path / "stranger" / "weights.key").write_bytes((tmp_path / "keys" / "weights.key").read_bytes())
        for name, outsider in [("plain", PlaneNet()), ("unauthorized", stranger)]:
            async def on_bucket(*_):
                raise AssertionError(f"a {name} client received a bucket")

            with pytest.raises(WeightTransferError, match="gave up"):
                await pull_version(1, [store.address], on_bucket, timeout_s=0.5, retries=1, net=outsider)
        assert store.server.bytes_sent == sum(t.numel() * t.element_size() for _, t in named)  # fed w0 alone
    finally:
        for x in (src, store, *workers):
            await x.close()


def test_plain_bind_beyond_loopback_is_refused_and_actor_settings_are_followed(tmp_path, monkeypatch):
    ip = routable_ip()
    with pytest.raises(ValueError, match="unencrypted"):
        BucketServer(f"tcp://{ip}:0", net=PlaneNet())
    with pytest.raises(ValueError, match="CURVE key directory"):
        PlaneNet(ip)
    monkeypatch.delenv(COORDINATOR_VAR, raising=False)
    assert plane_net() == PlaneNet()  # outside an actor process: loopback
    monkeypatch.setenv(COORDINATOR_VAR, "tcp://127.0.0.1:5555")
    monkeypatch.setenv(CURVE_DIR_VAR, str(tmp_path))
    assert plane_net() == PlaneNet()  # a coordinator on loopback: one machine, plain
    monkeypatch.setenv(COORDINATOR_VAR, f"tcp://{ip}:5555")
    assert plane_net() == PlaneNet(ip, str(tmp_path))  # beyond loopback: this node's IP and the run's keys
