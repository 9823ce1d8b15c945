"""Unit tests of rollart.actors.messages/codec: encode/decode of every message and payload type, and clear errors for bad input."""
import msgpack
import numpy as np
import pytest
import torch

from rollart.actors import WireError, allow_dataclass_modules
from rollart.actors import messages as m
from rollart.actors.codec import pack_value, unpack_value
from rollart.types import SamplingParams

import sample_actors


def roundtrip(value):
    data, buffers = pack_value(value)
    return unpack_value(data, buffers)


def test_every_message_kind_round_trips():
    msgs = [m.Hello("a", "x:Y", 1, "h", [1], {"k": 2}), m.Init("x:Y", [1, (2,)], {"a": None}),
            m.Ready(True, ["f"]), m.Call(7, "f", False, [np.arange(3)], {"k": b"v"}),
            m.Send(7, sample_actors.Scale(2)), m.Result(7, {"r": 1}),
            m.Error(7, "builtins.ValueError", "bad", "tb", ["builtins.ValueError"]), m.Item(7, 3), m.End(7),
            m.Cancel(7), m.Credit(7, 32), m.Ping(1), m.Pong(1, True), m.Stop("why"), m.Reject("r")]
    assert {type(x) for x in msgs} == set(m.MESSAGE_TYPES.values())
    for msg in msgs:
        frames = m.encode(msg)
        assert frames[0] == bytes((msg.KIND, m.VERSION))
        back = m.decode(frames)
        assert type(back) is type(msg)
        for name in type(msg).__slots__:
            a, b = getattr(msg, name), getattr(back, name)
            if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
                assert np.array_equal(a[0], b[0])
            else:
                assert a == b, (type(msg).__name__, name)


CALL = bytes((m.Kind.CALL, m.VERSION))


@pytest.mark.parametrize("frames, match", [
    ([b"\x04"], "expected >= 2 frames"),
    ([b"\x04\x01\x00", b""], "header frame must be 2 bytes"),
    ([bytes((4, 99)), b""], "wire version 99 not supported"),
    ([bytes((200, m.VERSION)), b""], "unknown message kind 200"),
    ([CALL, b"\xc1"], "body frame is not valid msgpack"),
    ([CALL, msgpack.packb([1, "f"])], "body must be a list of 4 fields"),
    ([CALL, msgpack.packb(["1", "f", False, b""])], "Call.call_id must be int"),
    ([CALL, msgpack.packb([True, "f", False, b""])], "Call.call_id must be int, got bool"),
    ([bytes((m.Kind.CANCEL, m.VERSION)), msgpack.packb([1]), b"extra"], "carries no payload"),
])
def test_malformed_frames_raise_wire_error(frames, match):
    with pytest.raises(WireError, match=match):
        m.decode(frames)


def test_small_messages_are_two_frames():
    assert len(m.encode(m.Call(1, "f", False, [1, "x"], {"k": 2.0}))) == 2
    assert len(m.encode(m.Cancel(1))) == 2
    assert len(m.encode(m.Result(1, np.zeros(1000)))) == 3  # + one zero-copy buffer frame


def test_bad_payload_keeps_the_call_id():
    frames = [CALL, msgpack.packb([42, "f", False, b"\xc1garbage"])]
    with pytest.raises(m.PayloadError) as info:
        m.decode(frames)
    assert info.value.message.call_id == 42 and info.value.message.method == "f"
    frames = [CALL, msgpack.packb([42, "f", False, msgpack.packb([[1], {1: 2}])])]
    with pytest.raises(m.PayloadError, match="kwargs a dict with str keys"):
        m.decode(frames)
    frames = [CALL, msgpack.packb([42, "f", False, "not bin"])]
    with pytest.raises(m.PayloadError, match="payload must be msgpack bin"):
        m.decode(frames)


def test_payload_values_round_trip():
    value = {"t": (1, [2, (3,)]), 5: None, "f": np.float32(1.5), "sp": SamplingParams(top_k=3),
             "p": sample_actors.Point(2, 3.0), "bf": torch.ones(600, dtype=torch.bfloat16)}
    out = roundtrip(value)
    assert out["t"] == (1, [2, (3,)]) and out[5] is None and out["f"] == 1.5
    assert out["sp"] == SamplingParams(top_k=3) and out["p"] == sample_actors.Point(2, 3.0)
    assert out["bf"].dtype == torch.bfloat16 and torch.equal(out["bf"], value["bf"])


def test_big_arrays_travel_as_separate_frames_small_ones_inline():
    data, buffers = pack_value([np.zeros(10), np.zeros(1000), torch.zeros(1000)])
    assert len(buffers) == 2
    assert sum(memoryview(b).nbytes for b in buffers) == 8000 + 4000


def test_dataclass_allow_rule():
    with pytest.raises(WireError, match="not allowed on the wire.*wire_dataclass"):
        pack_value(sample_actors.Unregistered(1))
    # a peer could still send one: decoding refuses a path that is neither registered nor allowed
    forged = msgpack.packb(msgpack.ExtType(3, msgpack.packb(["os:system", {}])))
    with pytest.raises(WireError, match="'os:system' is not allowed"):
        unpack_value(forged, [])
    forged = msgpack.packb(msgpack.ExtType(3, msgpack.packb(["rollart.types:InvalidRequestError", {}])))
    with pytest.raises(WireError, match="is not a dataclass"):
        unpack_value(forged, [])


ALLOW_OWN_PREFIX = """
from rollart.actors import allow_dataclass_modules, allowed_dataclass_modules
from rollart.actors.codec import pack_value, unpack_value
import sample_actors
assert allowed_dataclass_modules() == ("rollart",), allowed_dataclass_modules()  # no shipped package
try:
    pack_value(sample_actors.Unregistered(4))
    raise SystemExit("encoded a dataclass of a module nobody allowed")
except ValueError:
    pass
allow_dataclass_modules("sample_actors")
allow_dataclass_modules("sample_actors.")  # idempotent, trailing dot ignored
assert allowed_dataclass_modules() == ("rollart", "sample_actors"), allowed_dataclass_modules()
assert unpack_value(*pack_value(sample_actors.Unregistered(4))) == sample_actors.Unregistered(4)
print("ok")
"""


def test_a_package_allows_its_own_dataclasses():
    """The public way for a package (say, one shipping environments) to put its dataclasses on the wire;
    in a fresh interpreter, since an allowed prefix stays allowed for the life of the process."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", ALLOW_OWN_PREFIX], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(__file__))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    with pytest.raises(ValueError, match="module prefixes"):
        allow_dataclass_modules("sample_actors:Unregistered")


def test_dataclass_validation_runs_on_decode():
    data, _ = pack_value(SamplingParams())
    bad = data.replace(msgpack.packb("top_p") + msgpack.packb(1.0), msgpack.packb("top_p") + msgpack.packb(7.0))
    with pytest.raises(WireError, match="top_p must be in"):
        unpack_value(bad, [])


def test_unsupported_values_name_the_type():
    with pytest.raises(WireError, match="cannot send a builtins.set"):
        pack_value({1, 2})
    with pytest.raises(WireError, match="object/structured dtypes"):
        pack_value(np.array([object()]))


@pytest.mark.parametrize("ext", [
    msgpack.ExtType(1, msgpack.packb(["<f8", [4], 0])),         # buffer index out of range
    msgpack.ExtType(1, msgpack.packb(["<f8", [4], b"\x00" * 8])),  # wrong byte count
    msgpack.ExtType(1, msgpack.packb(["O", [1], b"\x00" * 8])),    # object dtype
    msgpack.ExtType(1, msgpack.packb(["nonsense", [1], b""])),
    msgpack.ExtType(2, msgpack.packb(["Tensor", [1], b"\x00" * 4])),
    msgpack.ExtType(2, msgpack.packb(["float32", [-1], b""])),
    msgpack.ExtType(9, b""),
])
def test_malformed_array_exts_raise_wire_error(ext):
    with pytest.raises(WireError):
        unpack_value(msgpack.packb(ext), [])
