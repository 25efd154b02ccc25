"""The on-disk episode format (see docs/episode_format.md).

One directory per episode under a store root::

    ROOT/<episode_id>/episode.json   metadata (atomically replaced: at start, at end)
    ROOT/<episode_id>/steps.jsonl    append-only records, one JSON object per line
    ROOT/<episode_id>/frames/<h>.png deduplicated frames, named by content hash
    ROOT/index.sqlite                a query index, derived from the directories

Observations, actions and info are stored as *tagged JSON values*
(:func:`encode_value` / :func:`decode_value`): images become frame references,
other arrays carry dtype and shape, dicts and tuples keep their kind.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import os
import re
import secrets
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

FORMAT_VERSION = 1
META_FILE = "episode.json"
STEPS_FILE = "steps.jsonl"
FRAMES_DIR = "frames"
INDEX_FILE = "index.sqlite"
FRAME_EXT = ".png"

#: outcomes of an episode (``episode.json`` ``outcome``, ``farm episodes ls --outcome``)
OUTCOMES = ("success", "failure", "truncated", "error", "abandoned", "incomplete")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def new_episode_id(env_id: str, now: dt.datetime | None = None) -> str:
    """``<UTC time>-<env slug>-<random>``: sortable by time, unique, a safe file name."""
    now = now or dt.datetime.now(dt.UTC)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", env_id).strip("-")[:48] or "env"
    return f"{now.strftime('%Y%m%dT%H%M%S')}-{slug}-{secrets.token_hex(4)}"


def valid_episode_id(name: str) -> bool:
    return bool(_ID_RE.match(name))


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def outcome_of(
    terminated: bool, truncated: bool, total_reward: float, infra_reason: str | None
) -> str:
    """The outcome of an episode that ended with these flags."""
    if infra_reason:
        return "error"
    if terminated:
        return "success" if total_reward > 0 else "failure"
    if truncated:
        return "truncated"
    return "abandoned"


# ---------------------------------------------------------------- metadata


@dataclass
class EpisodeMeta:
    """What ``episode.json`` holds (``end`` is filled when the episode ends)."""

    episode_id: str
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    options: dict[str, Any] | None = None
    task: str | None = None
    kind: str | None = None
    job: str | None = None
    created: str = field(default_factory=utc_now)
    versions: dict[str, str] = field(default_factory=dict)
    observation_space: str | None = None  # base64 of a zlib-compressed farm.v1.Space message
    action_space: str | None = None
    host: str = ""
    pid: int = 0
    format_version: int = FORMAT_VERSION
    end: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeMeta:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def space_to_b64(space: Any) -> str | None:
    """A gymnasium space as base64 of its zlib-compressed ``farm.v1.Space`` message
    (None if farm cannot describe it). Bounds arrays of image spaces compress to bytes."""
    from farm import codec

    try:
        data = codec.space_to_proto(space).SerializeToString()
        return base64.b64encode(zlib.compress(data, 6)).decode()
    except Exception:  # noqa: BLE001 - spaces farm cannot describe are simply not stored
        return None


def space_from_b64(data: str) -> Any:
    from farm import codec
    from farm.proto import farm_pb2 as pb

    return codec.space_from_proto(pb.Space.FromString(zlib.decompress(base64.b64decode(data))))


# ---------------------------------------------------------------- values


def is_frame(value: Any) -> bool:
    """Arrays stored as frame files: uint8 HxW, HxWx1, HxWx3 or HxWx4 images."""
    return (
        isinstance(value, np.ndarray)
        and value.dtype == np.uint8
        and (value.ndim == 2 or (value.ndim == 3 and value.shape[2] in (1, 3, 4)))
        and value.shape[0] >= 8
        and value.shape[1] >= 8
    )


def frame_hash(arr: np.ndarray) -> str:
    """Content hash of an image (its shape and bytes): the frame's file name stem."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).data)
    return h.hexdigest()


def encode_value(value: Any, frames: dict[str, np.ndarray]) -> Any:
    """``value`` as tagged JSON; images are added to ``frames`` (hash -> array)."""
    if isinstance(value, np.ndarray):
        if is_frame(value):
            h = frame_hash(value)
            frames.setdefault(h, value)
            return {"$frame": h, "shape": list(value.shape)}
        return {"$array": value.tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, dict):
        return {"$dict": {str(k): encode_value(v, frames) for k, v in value.items()}}
    if isinstance(value, tuple):
        return {"$tuple": [encode_value(v, frames) for v in value]}
    if isinstance(value, list):
        return [encode_value(v, frames) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return {"$repr": repr(value)}


def decode_value(data: Any, load_frame: Any = None) -> Any:
    """Inverse of :func:`encode_value`; ``load_frame(hash)`` gives a frame's array
    (without it, frames decode to their hash string)."""
    if isinstance(data, list):
        return [decode_value(v, load_frame) for v in data]
    if not isinstance(data, dict):
        return data
    if "$frame" in data:
        return load_frame(data["$frame"]) if load_frame is not None else data["$frame"]
    if "$array" in data:
        return np.asarray(data["$array"], dtype=np.dtype(data["dtype"])).reshape(data["shape"])
    if "$dict" in data:
        return {k: decode_value(v, load_frame) for k, v in data["$dict"].items()}
    if "$tuple" in data:
        return tuple(decode_value(v, load_frame) for v in data["$tuple"])
    if "$float" in data:
        return float(data["$float"])
    if "$repr" in data:
        return data["$repr"]
    return {k: decode_value(v, load_frame) for k, v in data.items()}


def jsonable(value: Any) -> Any:
    """Plain JSON for info dicts and annotations (numpy -> numbers/lists, else repr)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 4096 else f"<array {value.dtype} {value.shape}>"
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def dumps_line(record: dict[str, Any]) -> bytes:
    """One complete ``steps.jsonl`` line (compact JSON + newline)."""
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def frame_path(episode_dir: str, h: str) -> str:
    return os.path.join(episode_dir, FRAMES_DIR, h + FRAME_EXT)
