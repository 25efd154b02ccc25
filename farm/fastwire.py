"""Per-space fast paths for the per-step messages.

A session's spaces never change, so the bytes that frame a fixed-shape array
(``Value.array`` with its dtype and shape, and the length of its data) are the
same at every step. :func:`plan_for` works them out once per space; encoding is
then one header plus the array's buffer, and decoding is one comparison plus
``np.frombuffer``. Discrete values get the same treatment.

Every fast path writes exactly the bytes of :func:`farm.wire.encode_value`
and accepts exactly what :func:`farm.wire.read_value` accepts: whatever does
not match the precomputed layout (another dtype, a list instead of an array, a
value from another writer) goes through the generic functions, which also
raise their errors. ``tests/test_wire.py`` checks both agree on every space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from farm import wire

Chunks = wire.Chunks


@dataclass(frozen=True)
class SpacePlan:
    """How one space's values are written and read on the hot path.

    Attributes:
        space: the space.
        encode: ``encode(value, out) -> size``: append the fields of a ``Value``.
        decode: ``decode(buf, pos, end) -> value``: read the ``Value`` in ``buf[pos:end]``.
        contains: ``contains(value) -> bool`` for values that ``decode`` returned.
    """

    space: spaces.Space
    encode: Callable[[Any, Chunks], int]
    decode: Callable[[Any, int, int], Any]
    contains: Callable[[Any], bool]


def _generic(space: spaces.Space) -> SpacePlan:
    return SpacePlan(
        space,
        lambda value, out: wire.encode_value(space, value, out),
        lambda buf, pos, end: wire.read_value(space, buf, pos, end),
        space.contains,
    )


def _array_plan(space: spaces.Box | spaces.MultiBinary | spaces.MultiDiscrete) -> SpacePlan:
    dtype = np.dtype(space.dtype)
    shape = tuple(space.shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    count = nbytes // dtype.itemsize
    if nbytes == 0 or dtype.hasobject:
        return _generic(space)
    # everything before the data (Value and Array headers, the data's length), taken from
    # what the generic encoder writes for a zero array: the same bytes by construction
    zeros = wire.value_bytes(space, np.zeros(shape, dtype))
    header = zeros[: len(zeros) - nbytes]
    total = len(zeros)
    hlen = len(header)

    def encode(value: Any, out: Chunks) -> int:
        if type(value) is np.ndarray and value.dtype == dtype and value.shape == shape:
            if not value.flags.c_contiguous:
                value = np.ascontiguousarray(value)
            out.append(header)
            out.append(memoryview(value.reshape(-1).view(np.uint8)))
            return total
        return wire.encode_value(space, value, out)

    def decode(buf: Any, pos: int, end: int) -> Any:
        if end - pos == total and buf[pos : pos + hlen] == header:
            arr = np.frombuffer(buf, dtype=dtype, count=count, offset=pos + hlen)
            return arr.reshape(shape).copy()
        return wire.read_value(space, buf, pos, end)

    return SpacePlan(space, encode, decode, space.contains)


_INT_TAG = bytes([wire.V_INT << 3])  # Value.int, wire type 0 (varint)
_INT_TAG_BYTE = _INT_TAG[0]


def _discrete_plan(space: spaces.Discrete) -> SpacePlan:
    start, stop = int(space.start), int(space.start) + int(space.n)
    scalar = space.dtype.type

    def encode(value: Any, out: Chunks) -> int:
        if type(value) is int or isinstance(value, np.integer):
            data = _INT_TAG + wire.varint(int(value))
            out.append(data)
            return len(data)
        return wire.encode_value(space, value, out)

    def decode(buf: Any, pos: int, end: int) -> Any:
        if end - pos == 2 and buf[pos] == _INT_TAG_BYTE and buf[pos + 1] < 0x80:
            return scalar(buf[pos + 1])  # a one-byte varint: 0..127
        return wire.read_value(space, buf, pos, end)

    def contains(value: Any) -> bool:
        if type(value) is scalar:
            return start <= value < stop
        return space.contains(value)

    return SpacePlan(space, encode, decode, contains)


def plan_for(space: spaces.Space) -> SpacePlan:
    """The hot-path plan for ``space`` (generic where no fast path applies)."""
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return _array_plan(space)
    if isinstance(space, spaces.Discrete):
        return _discrete_plan(space)
    return _generic(space)
