"""The fault suite's real-process tools: finding a run's actor processes in /proc and kill -9 of one (the
runtime restarts it), the rogue peer's malformed frames on a live coordinator socket (every one counted as
rejected, by what was wrong), and the small disk that fills under a checkpoint folder."""
import asyncio
import contextlib
import errno
import io
import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

from rollart.actors import ActorSystem, RestartPolicy
from rollart.faults.disk_full import LEFT_BYTES, SmallDisk
from rollart.faults.frames import KINDS, flood, malformed
from rollart.faults.procs import actor_processes, find_actor, kill9


async def test_find_and_kill9_an_actor_process():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
        h = await system.spawn("fault_actors:Counter", name="victim", restart=RestartPolicy(max_restarts=1))
        assert await h.add(2) == 2
        proc = find_actor("Counter")
        assert proc is not None and proc.name == "victim" and proc.endpoint == system.endpoint
        assert proc.pid == h.pid and find_actor("NoSuchActor") is None
        kill9(proc)
        for _ in range(200):  # the runtime notices the exit and restarts it in place
            try:
                if await h.add(1) == 1:
                    break
            except Exception:  # noqa: BLE001 - dead or restarting meanwhile
                await asyncio.sleep(0.1)
        assert h.pid != proc.pid and [p.pid for p in actor_processes()] == [h.pid]


def test_malformed_frames_are_malformed():
    from rollart.actors import messages as m
    from rollart.actors.errors import WireError
    rng = random.Random(0)
    accepted = 0
    for _ in range(2000):
        frames = malformed(rng)
        try:
            msg = m.decode(frames)
        except WireError:
            continue
        # what decodes is a reply to a call the sender never received, or a message only a coordinator sends
        assert type(msg).__name__ in {"Result", "End", "Error", "Item", "Init", "Call", "Stop", "Pong", "Cancel"}
        accepted += 1
    assert accepted < 600


async def test_a_live_coordinator_survives_the_rogue_peer_and_counts_every_frame():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
        h = await system.spawn("fault_actors:Counter", name="bystander", mode="inprocess")
        out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "rollart.faults.frames", system.endpoint,
                                                       "--count", "2000", "--seed", "1"],
                                      capture_output=True, text=True, timeout=120)
        lines = out.stdout.splitlines()
        assert out.returncode == 0 and lines[-1] == "done 2000"
        assert sum(json.loads(lines[-2].removeprefix("kinds ")).values()) == 2000
        for _ in range(200):
            if system.rejected >= 2000:
                break
            await asyncio.sleep(0.05)
        assert system.rejected == sum(system.rejections.values()) == 2000, system.rejections
        assert await h.add(42) == 42


# what the coordinator says was wrong with each kind of malformed frame (junk may read as anything)
REASONS = {"bad_header": {"wire_version", "unknown_kind"},
           "header_only_or_junk_body": {"too_few_frames", "bad_body", "mistyped_field"},
           "mistyped_body": {"bad_body", "mistyped_field"},
           "undecodable_payload": {"bad_payload", "unsolicited_reply"},  # a junk payload may decode, by chance
           "forged_ext": {"bad_payload", "unsolicited_reply"},  # a tuple ext decodes: a well-formed forged reply
           "forged_reply": {"unsolicited_reply"}, "mistyped_hello": {"mistyped_field"},
           "coordinator_message": {"unexpected_kind"}, "stray_buffer": {"extra_frames"}}


async def test_every_kind_of_malformed_frame_is_counted_as_rejected_with_its_reason():
    """The frame ledger adds up kind by kind: sent == rejected, summed over the reasons (a frame the coordinator
    drops without counting it, such as a forged reply it ignores, fails this)."""
    n = 300
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
        h = await system.spawn("fault_actors:Counter", name="bystander", mode="inprocess")
        seen = {}
        for i, kind in enumerate(KINDS):
            before = Counter(system.rejections)
            with contextlib.redirect_stdout(io.StringIO()):
                sent = await asyncio.to_thread(flood, system.endpoint, n, i, 10.0, i)
            assert sent == {kind: n}
            for _ in range(100):
                delta = Counter(system.rejections) - before
                if delta.total() >= n:
                    break
                await asyncio.sleep(0.05)
            seen[kind] = dict(delta)
            assert delta.total() == n, (kind, seen[kind])
            assert set(delta) <= REASONS.get(kind, set(delta)), (kind, seen[kind])
        assert system.rejected == sum(system.rejections.values()) == n * len(KINDS)
        assert await h.add(1) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs needs root")
def test_the_small_disk_fills_for_real_and_empties(tmp_path):
    disk = SmallDisk(tmp_path / "checkpoints")
    disk.mount()
    try:
        assert disk.mounted and "ENOSPC" in disk.how
        disk.fill(0)
        with pytest.raises(OSError) as e:
            (disk.folder / "big").write_bytes(b"x" * (2 * LEFT_BYTES))
        assert e.value.errno == errno.ENOSPC
        disk.free()
        (disk.folder / "big").write_bytes(b"x" * (2 * LEFT_BYTES))
    finally:
        disk.unmount()
    assert not (tmp_path / "checkpoints" / "big").exists()  # it was on the tmpfs, gone with it


def test_without_a_disk_of_its_own_the_writers_file_size_limit_stands_in(tmp_path):
    disk = SmallDisk(tmp_path / "checkpoints")  # not mounted: the limit of the writing process
    disk.folder.mkdir()
    script = ("import sys\nfor _ in sys.stdin:\n    try:\n        open(sys.argv[1], 'wb').write(b'x' * int(sys.argv[2]))"
              "\n        print('ok', flush=True)\n    except OSError as e:\n        print(e.errno, flush=True)")
    writer = subprocess.Popen([sys.executable, "-c", script, str(disk.folder / "big"), str(2 * LEFT_BYTES)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert "RLIMIT_FSIZE" in disk.how and disk.fill(writer.pid).startswith(f"pid {writer.pid}")

        def write() -> str:
            writer.stdin.write("go\n")
            writer.stdin.flush()
            return writer.stdout.readline().strip()

        assert write() == str(errno.EFBIG)
        assert disk.free() == "file-size limit lifted"
        assert write() == "ok"
    finally:
        writer.kill()
        writer.wait()
