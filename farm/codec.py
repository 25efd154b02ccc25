"""Conversions between gymnasium spaces/values and the wire messages.

Encoding is guided by the space: the space says which ``Value`` field carries
the value, so nothing is guessed and nothing is packed element by element.
Arrays travel as their raw C-order bytes with dtype and shape; uint8 images may
travel PNG/JPEG-encoded (see :mod:`farm.images`). Decoding validates shape,
dtype and byte count and raises :class:`~farm.errors.EncodingError` naming
what was wrong; bounds are checked by the caller with ``space.contains``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from gymnasium import spaces

from farm.errors import EncodingError
from farm.proto import farm_pb2 as pb

__all__ = [
    "MAX_ARRAY_BYTES",
    "array_from_proto",
    "array_to_proto",
    "decode_info",
    "decode_value",
    "encode_info",
    "encode_value",
    "space_from_proto",
    "space_to_proto",
]

#: Largest array a single value may carry (decoded), 1 GiB.
MAX_ARRAY_BYTES = 1 << 30
_MAX_DIMS = 32

# ---------------------------------------------------------------- arrays


def array_to_proto(arr: np.ndarray, out: pb.Array | None = None) -> pb.Array:
    """Raw bytes + dtype + shape, no per-element packing."""
    arr = np.ascontiguousarray(arr)
    msg = pb.Array() if out is None else out
    msg.dtype = arr.dtype.str
    msg.shape[:] = arr.shape
    msg.data = arr.tobytes()
    return msg


def _dtype(name: str) -> np.dtype:
    try:
        dt = np.dtype(name)
    except (TypeError, ValueError) as e:
        raise EncodingError(f"unknown dtype {name!r}") from e
    if dt.hasobject or dt.kind not in "biufc":
        raise EncodingError(f"dtype {name!r} is not a numeric dtype")
    return dt


def array_from_proto(msg: pb.Array) -> np.ndarray:
    """A new, writable array from its message; validates dtype, shape and size."""
    if msg.encoding != pb.IMAGE_ENCODING_RAW:
        from farm.images import decode_image

        return decode_image(msg)
    dt = _dtype(msg.dtype)
    shape = tuple(msg.shape)
    if len(shape) > _MAX_DIMS or any(d < 0 for d in shape):
        raise EncodingError(f"invalid array shape {shape}")
    count = math.prod(shape)
    if count * dt.itemsize > MAX_ARRAY_BYTES:
        raise EncodingError(f"array of shape {shape} and dtype {dt} is too large")
    data = msg.data
    if len(data) != count * dt.itemsize:
        raise EncodingError(
            f"array of shape {shape} and dtype {dt} needs {count * dt.itemsize} bytes, "
            f"got {len(data)}"
        )
    return np.frombuffer(data, dtype=dt).reshape(shape).copy()


# ---------------------------------------------------------------- spaces


def space_to_proto(space: spaces.Space) -> pb.Space:
    """The wire description of a gymnasium space (exact: bounds, dtypes, charsets)."""
    msg = pb.Space()
    if isinstance(space, spaces.Box):
        array_to_proto(space.low, msg.box.low)
        array_to_proto(space.high, msg.box.high)
    elif isinstance(space, spaces.Discrete):
        msg.discrete.n = int(space.n)
        msg.discrete.start = int(space.start)
        msg.discrete.dtype = np.dtype(space.dtype).str
    elif isinstance(space, spaces.MultiDiscrete):
        array_to_proto(space.nvec, msg.multi_discrete.nvec)
        array_to_proto(space.start, msg.multi_discrete.start)
    elif isinstance(space, spaces.MultiBinary):
        msg.multi_binary.shape[:] = space.shape
    elif isinstance(space, spaces.Text):
        msg.text.min_length = space.min_length
        msg.text.max_length = space.max_length
        msg.text.charset = "".join(sorted(space.character_set))
    elif isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            msg.dict.keys.append(str(key))
            msg.dict.spaces.append(space_to_proto(sub))
    elif isinstance(space, spaces.Tuple):
        msg.tuple.spaces.extend(space_to_proto(s) for s in space.spaces)
    elif isinstance(space, spaces.Sequence):
        msg.sequence.feature_space.CopyFrom(space_to_proto(space.feature_space))
        msg.sequence.stack = space.stack
    elif isinstance(space, spaces.OneOf):
        msg.one_of.spaces.extend(space_to_proto(s) for s in space.spaces)
    else:
        raise EncodingError(f"space type {type(space).__name__} is not supported by the protocol")
    return msg


def space_from_proto(msg: pb.Space) -> spaces.Space:
    """The gymnasium space described by ``msg``; equal (``==``) to the original."""
    kind = msg.WhichOneof("kind")
    if kind == "box":
        low, high = array_from_proto(msg.box.low), array_from_proto(msg.box.high)
        return spaces.Box(low=low, high=high, shape=low.shape, dtype=low.dtype)
    if kind == "discrete":
        d = msg.discrete
        return spaces.Discrete(d.n, start=d.start, dtype=np.dtype(d.dtype or "int64").type)
    if kind == "multi_discrete":
        nvec = array_from_proto(msg.multi_discrete.nvec)
        start = array_from_proto(msg.multi_discrete.start)
        return spaces.MultiDiscrete(nvec, dtype=nvec.dtype.type, start=start)
    if kind == "multi_binary":
        shape = list(msg.multi_binary.shape)
        return spaces.MultiBinary(shape[0] if len(shape) == 1 else shape)
    if kind == "text":
        t = msg.text
        return spaces.Text(t.max_length, min_length=t.min_length, charset=t.charset)
    if kind == "dict":
        return spaces.Dict(
            {k: space_from_proto(s) for k, s in zip(msg.dict.keys, msg.dict.spaces, strict=True)}
        )
    if kind == "tuple":
        return spaces.Tuple([space_from_proto(s) for s in msg.tuple.spaces])
    if kind == "sequence":
        feature = space_from_proto(msg.sequence.feature_space)
        return spaces.Sequence(feature, stack=msg.sequence.stack)
    if kind == "one_of":
        return spaces.OneOf([space_from_proto(s) for s in msg.one_of.spaces])
    raise EncodingError(f"unknown space kind {kind!r}")


# ---------------------------------------------------------------- values

_ARRAY_SPACES = (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)


def _as_space_array(space: spaces.Space, value: Any) -> np.ndarray:
    """``value`` as an array of the space's dtype, with gymnasium's casting rule."""
    if isinstance(value, np.ndarray):
        if value.dtype != space.dtype:
            if not np.can_cast(value.dtype, space.dtype):
                raise EncodingError(
                    f"array of dtype {value.dtype} cannot be cast safely to {space}'s "
                    f"dtype {space.dtype}"
                )
            value = value.astype(space.dtype)
        return value
    try:
        return np.asarray(value, dtype=space.dtype)
    except (TypeError, ValueError) as e:
        raise EncodingError(f"{value!r} is not a valid value of {space}: {e}") from e


def encode_value(space: spaces.Space, value: Any, out: pb.Value | None = None) -> pb.Value:
    """Encode ``value`` (a member of ``space``) into a ``Value`` message."""
    msg = pb.Value() if out is None else out
    if isinstance(space, _ARRAY_SPACES):
        arr = _as_space_array(space, value)
        if arr.shape != space.shape:
            raise EncodingError(f"value of shape {arr.shape} does not fit {space}")
        array_to_proto(arr, msg.array)
    elif isinstance(space, spaces.Discrete):
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value.item()
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise EncodingError(f"{value!r} is not an integer; {space} takes an integer")
        msg.int = int(value)
    elif isinstance(space, spaces.Text):
        if not isinstance(value, str):
            raise EncodingError(f"{value!r} is not a string; {space} takes a string")
        msg.text = value
    elif isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            raise EncodingError(f"{type(value).__name__} is not a dict; {space} takes a dict")
        missing = set(space.spaces) - set(value)
        if missing:
            raise EncodingError(f"dict value is missing keys {sorted(missing)} of {space}")
        for key, sub in space.spaces.items():
            msg.dict.keys.append(key)
            encode_value(sub, value[key], msg.dict.values.add())
    elif isinstance(space, spaces.Tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(space.spaces):
            raise EncodingError(f"{value!r} is not a tuple of {len(space.spaces)} for {space}")
        for sub, item in zip(space.spaces, value, strict=True):
            encode_value(sub, item, msg.tuple.items.add())
    elif isinstance(space, spaces.Sequence):
        _encode_sequence(space, value, msg)
    elif isinstance(space, spaces.OneOf):
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise EncodingError(f"{value!r} is not an (index, value) pair for {space}")
        index = int(value[0])
        if not 0 <= index < len(space.spaces):
            raise EncodingError(f"index {index} is out of range for {space}")
        msg.tuple.items.add().int = index
        encode_value(space.spaces[index], value[1], msg.tuple.items.add())
    else:
        raise EncodingError(f"space type {type(space).__name__} is not supported by the protocol")
    return msg


def _encode_sequence(space: spaces.Sequence, value: Any, msg: pb.Value) -> None:
    feature = space.feature_space
    if space.stack:
        if not isinstance(feature, (*_ARRAY_SPACES, spaces.Discrete)):
            raise EncodingError(f"stacked {space} is only supported for array features")
        arr = np.asarray(value, dtype=feature.dtype)
        if arr.shape[1:] != feature.shape:
            raise EncodingError(f"stacked value of shape {arr.shape} does not fit {space}")
        array_to_proto(arr, msg.array)
        return
    if not isinstance(value, (tuple, list)):
        raise EncodingError(f"{type(value).__name__} is not a tuple; {space} takes a tuple")
    seq = msg.sequence
    seq.SetInParent()
    for item in value:
        encode_value(feature, item, seq.items.add())


def _expect(msg: pb.Value, kind: str, space: spaces.Space) -> None:
    got = msg.WhichOneof("kind")
    if got != kind:
        raise EncodingError(f"{space} expects a value of kind {kind!r}, got {got!r}")


def decode_value(space: spaces.Space, msg: pb.Value) -> Any:
    """Decode a ``Value`` of ``space``; raises :class:`EncodingError` on a mismatch.

    Array dtypes are cast to the space's dtype when the cast is safe
    (``np.can_cast``), as ``Box.contains`` allows; bounds are not checked here.
    """
    if isinstance(space, _ARRAY_SPACES):
        _expect(msg, "array", space)
        arr = array_from_proto(msg.array)
        if arr.shape != space.shape:
            raise EncodingError(f"value of shape {arr.shape} does not fit {space}")
        if arr.dtype != space.dtype:
            if not np.can_cast(arr.dtype, space.dtype):
                raise EncodingError(
                    f"value of dtype {arr.dtype} cannot be cast safely to {space.dtype} of {space}"
                )
            arr = arr.astype(space.dtype)
        return arr
    if isinstance(space, spaces.Discrete):
        _expect(msg, "int", space)
        return space.dtype.type(msg.int)
    if isinstance(space, spaces.Text):
        _expect(msg, "text", space)
        return msg.text
    if isinstance(space, spaces.Dict):
        _expect(msg, "dict", space)
        d = msg.dict
        if len(d.keys) != len(d.values):
            raise EncodingError("dict value has a different number of keys and values")
        items = dict(zip(d.keys, d.values, strict=True))
        if set(items) != set(space.spaces):
            raise EncodingError(
                f"dict value has keys {sorted(items)}, {space} has {sorted(space.spaces)}"
            )
        return {k: decode_value(sub, items[k]) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        _expect(msg, "tuple", space)
        items = msg.tuple.items
        if len(items) != len(space.spaces):
            raise EncodingError(f"tuple of {len(items)} items does not fit {space}")
        return tuple(decode_value(s, v) for s, v in zip(space.spaces, items, strict=True))
    if isinstance(space, spaces.Sequence):
        if space.stack:
            _expect(msg, "array", space)
            arr = array_from_proto(msg.array).astype(space.feature_space.dtype, copy=False)
            if arr.shape[1:] != space.feature_space.shape:
                raise EncodingError(f"stacked value of shape {arr.shape} does not fit {space}")
            return arr
        _expect(msg, "sequence", space)
        return tuple(decode_value(space.feature_space, v) for v in msg.sequence.items)
    if isinstance(space, spaces.OneOf):
        _expect(msg, "tuple", space)
        items = msg.tuple.items
        if len(items) != 2 or items[0].WhichOneof("kind") != "int":
            raise EncodingError(f"{space} expects an (index, value) pair")
        index = items[0].int
        if not 0 <= index < len(space.spaces):
            raise EncodingError(f"index {index} is out of range for {space}")
        return (np.int64(index), decode_value(space.spaces[index], items[1]))
    raise EncodingError(f"space type {type(space).__name__} is not supported by the protocol")


# ---------------------------------------------------------------- info / options


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return repr(obj)


def encode_info(info: dict[str, Any] | None) -> bytes:
    """JSON bytes for an info/options dict; ``b""`` for empty.

    JSON-compatible values round-trip exactly (ints stay ints); numpy scalars
    and arrays become numbers and lists; anything else becomes its ``repr``.
    """
    if not info:
        return b""
    return json.dumps(info, separators=(",", ":"), default=_json_default).encode()


def decode_info(data: bytes) -> dict[str, Any]:
    """The dict encoded by :func:`encode_info`."""
    if not data:
        return {}
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise EncodingError(f"info/options is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise EncodingError(f"info/options must be a JSON object, got {type(value).__name__}")
    return value
