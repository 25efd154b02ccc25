"""Optional PNG/JPEG transport for uint8 image observations (needs Pillow).

Raw bytes are the default and the fastest on loopback; encoding trades server
CPU for bandwidth, which pays off across machines. PNG is lossless, JPEG is not.
"""

from __future__ import annotations

import io

import numpy as np

from farm.errors import EncodingError, MissingExtraError
from farm.proto import farm_pb2 as pb

_FORMATS = {pb.IMAGE_ENCODING_PNG: "PNG", pb.IMAGE_ENCODING_JPEG: "JPEG"}


def _pil():
    try:
        from PIL import Image
    except ImportError as e:  # pragma: no cover - pillow is a core dependency
        raise MissingExtraError("pillow", "images") from e
    return Image


def is_image(arr: np.ndarray) -> bool:
    """uint8 arrays shaped HxW, HxWx1, HxWx3 or HxWx4 (and at least 16x16)."""
    if arr.dtype != np.uint8 or arr.ndim not in (2, 3):
        return False
    if arr.ndim == 3 and arr.shape[2] not in (1, 3, 4):
        return False
    return arr.shape[0] >= 16 and arr.shape[1] >= 16


def encode_image(arr: np.ndarray, encoding: int, quality: int, out: pb.Array) -> None:
    """Write ``arr`` into ``out`` as PNG or JPEG; RGBA falls back to PNG (JPEG has no alpha)."""
    image = _pil()
    if encoding == pb.IMAGE_ENCODING_JPEG and arr.ndim == 3 and arr.shape[2] == 4:
        encoding = pb.IMAGE_ENCODING_PNG
    img = image.fromarray(arr[:, :, 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr)
    buf = io.BytesIO()
    if encoding == pb.IMAGE_ENCODING_JPEG:
        img.save(buf, format="JPEG", quality=quality or 90)
    else:
        img.save(buf, format="PNG", compress_level=1)
    out.dtype = arr.dtype.str
    out.shape[:] = arr.shape
    out.data = buf.getvalue()
    out.encoding = encoding


def decode_image(msg: pb.Array) -> np.ndarray:
    """The uint8 array of an encoded image message, reshaped to its declared shape."""
    if msg.encoding not in _FORMATS:
        raise EncodingError(f"unknown image encoding {msg.encoding}")
    image = _pil()
    try:
        with image.open(io.BytesIO(msg.data)) as img:
            arr = np.asarray(img, dtype=np.uint8)
    except Exception as e:
        raise EncodingError(f"cannot decode {_FORMATS[msg.encoding]} image: {e}") from e
    shape = tuple(msg.shape)
    if arr.size != int(np.prod(shape)):
        raise EncodingError(f"decoded image has shape {arr.shape}, expected {shape}")
    return arr.reshape(shape).copy()


def encode_images_in_value(msg: pb.Value, encoding: int, quality: int) -> None:
    """Re-encode, in place, every image-like raw array inside a ``Value``."""
    kind = msg.WhichOneof("kind")
    if kind == "array":
        arr_msg = msg.array
        if arr_msg.encoding == pb.IMAGE_ENCODING_RAW and arr_msg.dtype == "|u1":
            shape = tuple(arr_msg.shape)
            arr = np.frombuffer(arr_msg.data, dtype=np.uint8).reshape(shape)
            if is_image(arr):
                encode_image(arr, encoding, quality, arr_msg)
    elif kind == "dict":
        for v in msg.dict.values:
            encode_images_in_value(v, encoding, quality)
    elif kind in ("tuple", "sequence"):
        for v in getattr(msg, kind).items:
            encode_images_in_value(v, encoding, quality)
