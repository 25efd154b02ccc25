"""Conversions between gymnasium spaces/values and the wire messages.

Encoding is guided by the space: the space says which ``Value`` field carries
the value, so nothing is guessed and nothing is packed element by element.
Arrays travel as their raw C-order bytes with dtype and shape; uint8 images may
travel PNG/JPEG-encoded (see :mod:`farm.images`). Decoding validates shape,
dtype and byte count and raises :class:`~farm.errors.EncodingError` naming
what was wrong; bounds are checked by the caller with ``space.contains``.

Values themselves are written and read by :mod:`farm.wire` (the per-step hot
path); the functions here wrap it for callers that hold ``farm_pb2`` messages.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

from farm import wire
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

MAX_ARRAY_BYTES = wire.MAX_ARRAY_BYTES

# ---------------------------------------------------------------- arrays


def array_to_proto(arr: np.ndarray, out: pb.Array | None = None) -> pb.Array:
    """Raw bytes + dtype + shape, no per-element packing."""
    chunks: wire.Chunks = []
    wire.encode_array(arr, chunks)
    msg = pb.Array() if out is None else out
    msg.ParseFromString(b"".join(chunks))  # replaces what `out` held
    return msg


def array_from_proto(msg: pb.Array) -> np.ndarray:
    """A new, writable array from its message; validates dtype, shape and size."""
    data = msg.SerializeToString()
    return wire.read_array(data, 0, len(data))


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


def encode_value(space: spaces.Space, value: Any, out: pb.Value | None = None) -> pb.Value:
    """``value`` (a member of ``space``) as a ``Value`` message (see :mod:`farm.wire`)."""
    msg = pb.Value() if out is None else out
    msg.ParseFromString(wire.value_bytes(space, value))  # replaces what `out` held
    return msg


def decode_value(space: spaces.Space, msg: pb.Value) -> Any:
    """Decode a ``Value`` of ``space``; raises :class:`EncodingError` on a mismatch.

    Array dtypes are cast to the space's dtype when the cast is safe
    (``np.can_cast``), as ``Box.contains`` allows; bounds are not checked here.
    """
    data = msg.SerializeToString()
    return wire.read_value(space, data, 0, len(data))


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


# built once: json.dumps() with these arguments would build a new encoder per call
_INFO_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_json_default)


def encode_info(info: dict[str, Any] | None) -> bytes:
    """JSON bytes for an info/options dict; ``b""`` for empty.

    JSON-compatible values round-trip exactly (ints stay ints); numpy scalars
    and arrays become numbers and lists; anything else becomes its ``repr``.
    """
    if not info:
        return b""
    return _INFO_ENCODER.encode(info).encode()


def decode_info(data: bytes) -> dict[str, Any]:
    """The dict encoded by :func:`encode_info`."""
    if not data:
        return {}
    try:
        # encode_info writes ASCII; decoding first skips json's encoding detection
        value = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (ValueError, UnicodeDecodeError) as e:
        raise EncodingError(f"info/options is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise EncodingError(f"info/options must be a JSON object, got {type(value).__name__}")
    return value
