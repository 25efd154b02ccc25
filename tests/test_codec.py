"""farm.codec: spaces and values survive the wire exactly; bad messages fail loudly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from hypothesis import given, settings
from hypothesis import strategies as st

from farm import codec
from farm.errors import EncodingError
from farm.proto import farm_pb2 as pb

INF = np.inf


def _spaces() -> dict[str, spaces.Space]:
    text = spaces.Text(12, min_length=2, charset="xyz- Q9")
    return {
        "box_f32": spaces.Box(-1.0, 2.0, (3, 2), np.float32),
        "box_f64_inf": spaces.Box(
            np.array([-INF, 0.0, -1.0]), np.array([INF, INF, 1.0]), dtype=np.float64
        ),
        "box_f32_all_inf": spaces.Box(-INF, INF, (4,), np.float32),
        "box_f16": spaces.Box(-3.0, 3.0, (2,), np.float16),
        "box_u8_image": spaces.Box(0, 255, (8, 6, 3), np.uint8),
        "box_i8": spaces.Box(-100, 100, (5,), np.int8),
        "box_i32": spaces.Box(-(2**20), 2**20, (2, 2), np.int32),
        "box_i64": spaces.Box(-(2**40), 2**40, (3,), np.int64),
        "box_u16": spaces.Box(0, 60000, (3,), np.uint16),
        "box_scalar": spaces.Box(-1.0, 1.0, (), np.float32),
        "box_bool": spaces.Box(0, 1, (4,), np.bool_),
        "discrete": spaces.Discrete(7),
        "discrete_start": spaces.Discrete(5, start=-3),
        "discrete_start_i32": spaces.Discrete(4, start=10, dtype=np.int32),
        "multi_discrete": spaces.MultiDiscrete([3, 4, 5]),
        "multi_discrete_2d_start": spaces.MultiDiscrete(
            np.array([[3, 4], [5, 6]]), start=np.array([[1, -2], [0, 7]])
        ),
        "multi_discrete_i32": spaces.MultiDiscrete([2, 9], dtype=np.int32),
        "multi_binary_1d": spaces.MultiBinary(6),
        "multi_binary_2d": spaces.MultiBinary([3, 4]),
        "text_charset": text,
        "text_default": spaces.Text(5),
        "dict": spaces.Dict(
            {"pos": spaces.Box(-1, 1, (2,), np.float32), "id": spaces.Discrete(3), "name": text}
        ),
        "tuple": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3), spaces.Text(4))),
        "sequence": spaces.Sequence(spaces.Box(0, 1, (2,), np.float32), stack=False),
        "sequence_of_text": spaces.Sequence(text, stack=False),
        "sequence_stack_box": spaces.Sequence(spaces.Box(-5, 5, (2, 3), np.int16), stack=True),
        "sequence_stack_discrete": spaces.Sequence(spaces.Discrete(9, start=1), stack=True),
        "one_of": spaces.OneOf((spaces.Discrete(3), spaces.Box(0, 1, (2,), np.float32), text)),
        "nested": spaces.Dict(
            {
                "outer": spaces.Tuple(
                    (
                        spaces.Dict(
                            {
                                "md": spaces.MultiDiscrete([2, 3]),
                                "seq": spaces.Sequence(spaces.Discrete(4)),
                            }
                        ),
                        spaces.OneOf((spaces.Text(3), spaces.MultiBinary([2, 2]))),
                    )
                ),
                "img": spaces.Box(0, 255, (4, 4, 1), np.uint8),
                "scalar": spaces.Box(-INF, INF, (), np.float64),
            }
        ),
    }


SPACES = _spaces()


def _roundtrip_space(space: spaces.Space) -> spaces.Space:
    wire = codec.space_to_proto(space).SerializeToString()
    return codec.space_from_proto(pb.Space.FromString(wire))


def _roundtrip_value(space: spaces.Space, value: object) -> object:
    wire = codec.encode_value(space, value).SerializeToString()
    return codec.decode_value(space, pb.Value.FromString(wire))


# ---------------------------------------------------------------- spaces


@pytest.mark.parametrize("name", sorted(SPACES))
def test_space_roundtrip_is_equal(name: str) -> None:
    space = SPACES[name]
    back = _roundtrip_space(space)
    assert type(back) is type(space)
    assert back == space, f"{space} came back as {back}"
    assert back.shape == space.shape
    if space.dtype is not None:
        assert back.dtype == space.dtype


def test_space_roundtrip_keeps_details() -> None:
    box = _roundtrip_space(SPACES["box_f64_inf"])
    assert np.array_equal(box.low, [-INF, 0.0, -1.0])
    assert np.array_equal(box.high, [INF, INF, 1.0])
    assert box.bounded_below.tolist() == [False, True, True]
    assert box.bounded_above.tolist() == [False, False, True]

    d = _roundtrip_space(SPACES["discrete_start_i32"])
    assert (d.n, d.start, d.dtype) == (4, 10, np.dtype(np.int32))

    md = _roundtrip_space(SPACES["multi_discrete_2d_start"])
    assert md.nvec.tolist() == [[3, 4], [5, 6]]
    assert md.start.tolist() == [[1, -2], [0, 7]]

    assert _roundtrip_space(SPACES["multi_binary_2d"]).shape == (3, 4)

    text = _roundtrip_space(SPACES["text_charset"])
    assert text.character_set == frozenset("xyz- Q9")
    assert (text.min_length, text.max_length) == (2, 12)

    keys = list(_roundtrip_space(SPACES["dict"]).spaces)
    assert keys == list(SPACES["dict"].spaces)

    assert _roundtrip_space(SPACES["sequence_stack_box"]).stack is True
    assert _roundtrip_space(SPACES["sequence"]).stack is False


def test_unsupported_space_is_refused() -> None:
    class Odd(spaces.Space):
        pass

    with pytest.raises(EncodingError, match="Odd is not supported"):
        codec.space_to_proto(Odd())
    with pytest.raises(EncodingError, match="unknown space kind"):
        codec.space_from_proto(pb.Space())


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("name", sorted(SPACES))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_value_roundtrip(name: str, seed: int) -> None:
    space = SPACES[name]
    space.seed(seed)
    value = space.sample()
    back = _roundtrip_value(space, value)
    assert data_equivalence(value, back, exact=True), f"{value!r} came back as {back!r}"
    assert space.contains(back)
    # decoding against the space rebuilt from the wire gives the same value
    rebuilt = _roundtrip_space(space)
    again = codec.decode_value(rebuilt, codec.encode_value(space, value))
    assert data_equivalence(value, again, exact=True)


def test_decoded_arrays_are_writable_copies() -> None:
    space = SPACES["box_f32"]
    value = space.sample()
    back = _roundtrip_value(space, value)
    back[0, 0] = 123.0  # must not raise (frombuffer views are read-only)
    assert value[0, 0] != 123.0


def test_non_contiguous_array_is_sent_in_logical_order() -> None:
    space = spaces.Box(0, 100, (3, 4), np.int64)
    value = np.arange(12, dtype=np.int64).reshape(4, 3).T  # Fortran-ordered view
    assert not value.flags.c_contiguous
    assert np.array_equal(_roundtrip_value(space, value), value)


def test_encoding_into_a_used_message_replaces_it() -> None:
    space = SPACES["dict"]
    space.seed(1)
    first, second = space.sample(), space.sample()
    msg = codec.encode_value(space, first)
    codec.encode_value(space, second, msg)
    assert data_equivalence(codec.decode_value(space, msg), second, exact=True)
    arr = codec.array_to_proto(np.zeros((2, 3), np.float32))
    codec.array_to_proto(np.arange(4, dtype=np.int64), arr)
    assert codec.array_from_proto(arr).tolist() == [0, 1, 2, 3]


def test_safe_casts_are_accepted() -> None:
    box = spaces.Box(-10, 10, (3,), np.float64)
    back = _roundtrip_value(box, np.array([1, 2, 3], dtype=np.int8))
    assert back.dtype == np.float64 and back.tolist() == [1.0, 2.0, 3.0]
    # a plain list is converted to the space's dtype
    back = _roundtrip_value(SPACES["box_i32"], [[1, 2], [3, 4]])
    assert back.dtype == np.int32 and back.tolist() == [[1, 2], [3, 4]]
    # decode side: a wire array of a narrower dtype is widened
    msg = pb.Value()
    codec.array_to_proto(np.array([1.5, 2.5, 3.5], np.float32), msg.array)
    back = codec.decode_value(box, msg)
    assert back.dtype == np.float64 and back.tolist() == [1.5, 2.5, 3.5]
    # Discrete takes numpy integers and 0-d integer arrays
    assert _roundtrip_value(SPACES["discrete"], np.int16(4)) == 4
    assert _roundtrip_value(SPACES["discrete"], np.array(5)) == 5


# ---------------------------------------------------------------- errors


def test_wrong_kind() -> None:
    msg = codec.encode_value(spaces.Discrete(3), 1)
    with pytest.raises(EncodingError, match=r"expects a value of kind 'array', got 'int'"):
        codec.decode_value(SPACES["box_f32"], msg)
    with pytest.raises(EncodingError, match=r"kind 'text', got 'int'"):
        codec.decode_value(SPACES["text_default"], msg)
    with pytest.raises(EncodingError, match=r"kind 'int', got None"):
        codec.decode_value(SPACES["discrete"], pb.Value())
    with pytest.raises(EncodingError, match="not an integer"):
        codec.encode_value(SPACES["discrete"], 1.0)
    with pytest.raises(EncodingError, match="not an integer"):
        codec.encode_value(SPACES["discrete"], True)
    with pytest.raises(EncodingError, match="not a string"):
        codec.encode_value(SPACES["text_default"], 5)
    with pytest.raises(EncodingError, match="not a dict"):
        codec.encode_value(SPACES["dict"], [1, 2])
    with pytest.raises(EncodingError, match=r"missing keys \['name'\]"):
        codec.encode_value(SPACES["dict"], {"pos": np.zeros(2, np.float32), "id": 1})
    with pytest.raises(EncodingError, match="not a tuple of 3"):
        codec.encode_value(SPACES["tuple"], (1, np.zeros(3, np.int8)))
    with pytest.raises(EncodingError, match=r"not an \(index, value\) pair"):
        codec.encode_value(SPACES["one_of"], 2)
    with pytest.raises(EncodingError, match="index 5 is out of range"):
        codec.encode_value(SPACES["one_of"], (5, 1))


def test_wrong_shape() -> None:
    space = SPACES["box_f32"]
    with pytest.raises(EncodingError, match=r"shape \(2, 3\) does not fit"):
        codec.encode_value(space, np.zeros((2, 3), np.float32))
    msg = pb.Value()
    codec.array_to_proto(np.zeros((6,), np.float32), msg.array)
    with pytest.raises(EncodingError, match=r"value of shape \(6,\) does not fit Box"):
        codec.decode_value(space, msg)
    stacked = SPACES["sequence_stack_box"]
    with pytest.raises(EncodingError, match=r"stacked value of shape \(4, 3, 2\) does not fit"):
        codec.encode_value(stacked, np.zeros((4, 3, 2), np.int16))
    tup = pb.Value()
    tup.tuple.items.add().int = 1
    with pytest.raises(EncodingError, match="tuple of 1 items does not fit"):
        codec.decode_value(SPACES["tuple"], tup)


def test_unsafe_dtype_cast() -> None:
    int_box = SPACES["box_i32"]
    with pytest.raises(EncodingError, match=r"float64 cannot be cast safely to .*int32"):
        codec.encode_value(int_box, np.zeros((2, 2), np.float64))
    msg = pb.Value()
    codec.array_to_proto(np.zeros((2, 2), np.float64), msg.array)
    with pytest.raises(EncodingError, match="dtype float64 cannot be cast safely to int32"):
        codec.decode_value(int_box, msg)
    codec.array_to_proto(np.zeros(6, np.int64), msg.array)
    with pytest.raises(EncodingError, match="int64 cannot be cast safely to int8"):
        codec.decode_value(spaces.MultiBinary(6), msg)


def test_byte_count_mismatch() -> None:
    msg = pb.Value()
    codec.array_to_proto(np.zeros((3, 2), np.float32), msg.array)
    msg.array.data = msg.array.data[:-1]
    with pytest.raises(EncodingError, match="needs 24 bytes, got 23"):
        codec.decode_value(SPACES["box_f32"], msg)
    msg.array.data = b"\0" * 25
    with pytest.raises(EncodingError, match="needs 24 bytes, got 25"):
        codec.decode_value(SPACES["box_f32"], msg)


def test_unknown_and_invalid_dtypes() -> None:
    for dtype, pattern in (
        ("not-a-dtype", "unknown dtype 'not-a-dtype'"),
        ("", "dtype '' is not a numeric dtype|unknown dtype"),
        ("<U4", "dtype '<U4' is not a numeric dtype"),
        ("|O", "dtype '|O' is not a numeric dtype"),
    ):
        arr = pb.Array(dtype=dtype, shape=[1], data=b"\0" * 8)
        with pytest.raises(EncodingError, match=pattern):
            codec.array_from_proto(arr)


def test_invalid_and_huge_shapes() -> None:
    with pytest.raises(EncodingError, match="invalid array shape"):
        codec.array_from_proto(pb.Array(dtype="<f4", shape=[-1], data=b""))
    with pytest.raises(EncodingError, match="too large"):
        codec.array_from_proto(pb.Array(dtype="<f8", shape=[1 << 20, 1 << 20], data=b""))
    with pytest.raises(EncodingError, match="invalid array shape"):
        codec.array_from_proto(pb.Array(dtype="|u1", shape=[1] * 40, data=b"\0"))


def test_dict_value_with_wrong_keys() -> None:
    msg = pb.Value()
    msg.dict.keys.extend(["pos", "id", "other"])
    for _ in range(3):
        msg.dict.values.add().int = 0
    with pytest.raises(EncodingError, match=r"has keys \['id', 'other', 'pos'\]"):
        codec.decode_value(SPACES["dict"], msg)
    msg.dict.keys.append("extra")
    with pytest.raises(EncodingError, match="different number of keys and values"):
        codec.decode_value(SPACES["dict"], msg)


# ---------------------------------------------------------------- info JSON


def test_info_roundtrip_plain_json() -> None:
    info = {
        "int": 3,
        "big": 2**53 + 1,
        "neg": -7,
        "float": 0.1,
        "bool": True,
        "none": None,
        "text": 'héllo "quoted" \n',
        "nested": {"list": [1, [2, [3, {"deep": [4.5]}]]], "empty": {}, "e": []},
    }
    back = codec.decode_info(codec.encode_info(info))
    assert back == info
    assert type(back["int"]) is int and type(back["big"]) is int and back["big"] == 2**53 + 1
    assert type(back["nested"]["list"][1][1][0]) is int
    assert type(back["bool"]) is bool


def test_info_numpy_values_become_plain() -> None:
    info = {
        "i64": np.int64(5),
        "u8": np.uint8(200),
        "f32": np.float32(0.5),
        "b": np.bool_(True),
        "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
        "farr": np.array([0.25, 1.5]),
        "nested": {"x": [np.int16(-2), np.array([True, False])]},
    }
    back = codec.decode_info(codec.encode_info(info))
    assert back == {
        "i64": 5,
        "u8": 200,
        "f32": 0.5,
        "b": True,
        "arr": [[0, 1, 2], [3, 4, 5]],
        "farr": [0.25, 1.5],
        "nested": {"x": [-2, [True, False]]},
    }
    assert type(back["i64"]) is int and type(back["u8"]) is int
    assert type(back["b"]) is bool
    assert type(back["arr"][1][2]) is int
    # the wire bytes are plain JSON
    assert json.loads(codec.encode_info(info))["arr"] == [[0, 1, 2], [3, 4, 5]]


def test_info_empty_and_invalid() -> None:
    assert codec.encode_info({}) == b""
    assert codec.encode_info(None) == b""
    assert codec.decode_info(b"") == {}
    with pytest.raises(EncodingError, match="not valid JSON"):
        codec.decode_info(b"{not json")
    with pytest.raises(EncodingError, match="must be a JSON object, got list"):
        codec.decode_info(b"[1, 2]")
    with pytest.raises(EncodingError, match="not valid JSON"):
        codec.decode_info(b"\xff\xfe")
