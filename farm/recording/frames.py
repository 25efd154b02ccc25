"""Frame files: PNG encoding and decoding of uint8 images."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

#: zlib level of frame PNGs (1 = fast; screenshots of UIs compress well at any level)
PNG_COMPRESS_LEVEL = 1


def encode_png(arr: np.ndarray) -> bytes:
    """A lossless PNG of an HxW / HxWx{1,3,4} uint8 array."""
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(
        buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL
    )
    return buf.getvalue()


def decode_png(data: bytes, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The array of a PNG; ``shape`` (as recorded) restores a trailing 1-channel axis."""
    with Image.open(io.BytesIO(data)) as img:
        arr = np.asarray(img)
    if shape is not None and tuple(arr.shape) != tuple(shape):
        arr = arr.reshape(shape)
    return arr
