"""farm.wire writes what the generated protobuf classes read, and reads what they write."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence

from farm import fastwire, wire
from farm.errors import EncodingError
from farm.proto import farm_pb2 as pb

SPACES = [
    spaces.Box(-1.0, 1.0, (4,), np.float32),
    spaces.Box(0, 255, (6, 5, 3), np.uint8),
    spaces.Box(-5, 5, (), np.int64),
    spaces.Discrete(7, start=-3),
    spaces.MultiDiscrete([[2, 3], [4, 5]]),
    spaces.MultiBinary(9),
    spaces.Text(12, min_length=0),
    spaces.Dict({"img": spaces.Box(0, 255, (2, 2, 3), np.uint8), "text": spaces.Text(5)}),
    spaces.Tuple([spaces.Discrete(3), spaces.Tuple([spaces.Text(2), spaces.MultiBinary(2)])]),
    spaces.Sequence(spaces.Discrete(4)),
    spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=True),
    spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1, (3,), np.float64)]),
]


def test_field_numbers_match_the_proto():
    fields = pb.Value.DESCRIPTOR.fields_by_name
    assert {k: fields[k].number for k in ("array", "int", "text", "dict", "tuple", "sequence")} == {
        "array": wire.V_ARRAY,
        "int": wire.V_INT,
        "text": wire.V_TEXT,
        "dict": wire.V_DICT,
        "tuple": wire.V_TUPLE,
        "sequence": wire.V_SEQUENCE,
    }
    arr = pb.Array.DESCRIPTOR.fields_by_name
    assert (arr["dtype"].number, arr["shape"].number, arr["data"].number) == (1, 2, 3)
    assert arr["encoding"].number == wire.A_ENCODING
    resp = pb.SessionResponse.DESCRIPTOR.fields_by_name
    assert resp["step"].number == wire.R_STEP and resp["reset"].number == wire.R_RESET
    assert resp["error"].number == wire.R_ERROR


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_values_round_trip_through_the_generated_classes(space):
    space.seed(3)
    for _ in range(20):
        value = space.sample()
        if isinstance(value, np.generic) and isinstance(space, spaces.Box):
            value = np.asarray(value)  # a 0-d Box value travels (and comes back) as a 0-d array
        data = wire.value_bytes(space, value)
        # the generated parser accepts it, and re-serializing gives bytes wire reads back
        msg = pb.Value.FromString(data)
        again = msg.SerializeToString()
        decoded = wire.read_value(space, again, 0, len(again))
        assert data_equivalence(value, decoded), (value, decoded)


def test_step_response_is_a_valid_session_response():
    space = spaces.Box(0, 255, (3, 4, 3), np.uint8)
    obs = space.sample()
    info = json.dumps({"k": [1, 2]}).encode()
    data = wire.step_response(space, obs, -1.5, True, False, info)
    msg = pb.SessionResponse.FromString(data)
    assert msg.WhichOneof("response") == "step"
    assert msg.step.reward == -1.5 and msg.step.terminated and not msg.step.truncated
    assert msg.step.info_json == info
    assert bytes(msg.step.observation.array.data) == obs.tobytes()
    assert list(msg.step.observation.array.shape) == [3, 4, 3]
    kind, payload = wire.read_response(msg.SerializeToString())
    assert kind == wire.R_STEP and {f for f, _, _ in payload} == {1, 2, 3, 5}


def test_reset_and_error_responses():
    space = spaces.Discrete(3)
    msg = pb.SessionResponse.FromString(wire.reset_response(space, 2, b""))
    assert msg.reset.observation.int == 2 and msg.reset.info_json == b""
    err = pb.SessionResponse()
    err.error.code = 9
    err.error.message = "step() refused"
    assert wire.read_response(err.SerializeToString()) == (wire.R_ERROR, (9, "step() refused"))


def test_decoded_arrays_are_writable_copies():
    space = spaces.Box(0, 1, (8,), np.float32)
    data = wire.value_bytes(space, np.ones(8, np.float32))
    arr = wire.read_value(space, data, 0, len(data))
    arr[0] = 5  # writable
    assert arr[0] == 5 and wire.read_value(space, data, 0, len(data))[0] == 1


@pytest.mark.parametrize(
    "data",
    [b"\x0a", b"\x0a\xff", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"\x0b\x00", b"\x00"],
)
def test_malformed_bytes_raise_encoding_error(data):
    with pytest.raises(EncodingError):
        wire.read_value(spaces.Box(0, 1, (2,)), data, 0, len(data))
    with pytest.raises(EncodingError):
        wire.read_response(data)


def test_wrong_wire_type_for_a_kind_is_rejected():
    data = pb.Value(int=3).SerializeToString().replace(b"\x10", b"\x18", 1)  # int -> text tag
    with pytest.raises(EncodingError, match="wire type"):
        wire.read_value(spaces.Text(4), data, 0, len(data))


# ---------------------------------------------------------------- farm.fastwire


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_plans_write_and_read_the_generic_bytes(space):
    plan = fastwire.plan_for(space)
    space.seed(5)
    for _ in range(20):
        value = space.sample()
        if isinstance(value, np.generic) and isinstance(space, spaces.Box):
            value = np.asarray(value)
        fast: wire.Chunks = []
        size = plan.encode(value, fast)
        data = b"".join(fast)
        assert data == wire.value_bytes(space, value) and size == len(data)
        padded = b"\x00" * 3 + data + b"\x00" * 2  # a Value inside a larger message
        decoded = plan.decode(padded, 3, 3 + len(data))
        assert data_equivalence(value, decoded), (value, decoded)
        assert plan.contains(decoded) == space.contains(decoded)


def test_array_plan_falls_back_for_other_layouts():
    space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    plan = fastwire.plan_for(space)
    value = np.array([0.5, -0.5, 0.25, 0.0], np.float32)
    for other in (value.tolist(), value.astype(np.float16), value.astype(">f4")):
        out: wire.Chunks = []
        plan.encode(other, out)
        assert b"".join(out) == wire.value_bytes(space, other)
    # another writer's layout (float16 on the wire, extra shape field) is read by the generic path
    msg = pb.Value()
    msg.array.dtype, msg.array.data = "<f2", value.astype(np.float16).tobytes()
    msg.array.shape.extend([4])
    data = msg.SerializeToString()
    got = plan.decode(data, 0, len(data))
    assert got.dtype == np.float32 and np.array_equal(got, value)
    # and its errors are the generic ones
    bad = pb.Value(int=3).SerializeToString()
    with pytest.raises(EncodingError, match="expects a value of kind 'array'"):
        plan.decode(bad, 0, len(bad))
    with pytest.raises(EncodingError, match="does not fit"):
        plan.encode(np.zeros(5, np.float32), [])


def test_discrete_plan_reads_every_integer_and_checks_the_range():
    space = spaces.Discrete(300, start=-5)
    plan = fastwire.plan_for(space)
    for v in (-5, 0, 100, 127, 128, 294, 400, -6):
        data = pb.Value(int=v).SerializeToString()
        got = plan.decode(data, 0, len(data))
        assert type(got) is np.int64 and got == v
        assert plan.contains(got) == space.contains(got) == (-5 <= v < 295)
    with pytest.raises(EncodingError, match="not an integer"):
        plan.encode(True, [])
    assert plan.contains(np.int32(3)) and not plan.contains(1.5)


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_step_request_is_what_the_generated_classes_write(space):
    space.seed(7)
    value = space.sample()
    if isinstance(value, np.generic) and isinstance(space, spaces.Box):
        value = np.asarray(value)
    expected = pb.SessionRequest()
    expected.step.action.ParseFromString(wire.value_bytes(space, value))
    assert wire.step_request(space, value) == expected.SerializeToString()
    plan = fastwire.plan_for(space)
    assert wire.build_step_request(plan.encode, value) == expected.SerializeToString()


def test_lone_field_only_takes_a_message_of_exactly_one_such_field():
    body = b"\x0a\x02\x10\x01"  # StepRequest{action: Value{int: 1}}
    msg = b"\x1a" + bytes([len(body)]) + body
    assert wire.lone_field(msg, 0, len(msg), 0x1A) == (2, len(msg))
    assert wire.lone_field(msg, 2, len(msg), 0x0A) == (4, len(msg))
    assert wire.lone_field(msg, 0, len(msg), 0x12) is None  # another field
    assert wire.lone_field(msg + b"\x20\x01", 0, len(msg) + 2, 0x1A) is None  # a second field
    assert wire.lone_field(msg[:-1], 0, len(msg) - 1, 0x1A) is None  # truncated
    assert wire.lone_field(b"\x1a\xff\xff", 0, 3, 0x1A) is None  # varint runs off the end
    assert wire.lone_field(b"", 0, 0, 0x1A) is None
