"""Reading one episode directory (tolerant of a crash while it was written)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from farm.recording import format as F
from farm.recording.errors import CorruptEpisodeError, EpisodeNotFoundError, MissingFrameError
from farm.recording.frames import decode_png


@dataclass
class StepRecord:
    """One step: ``index`` 0 is the reset (no action), then 1, 2, ... ."""

    index: int
    obs: Any  # tagged JSON (decode with Episode.observation)
    info: dict[str, Any]
    action: Any = None  # tagged JSON of the action (decode with Episode.action)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    t: float = 0.0  # wall-clock time (unix seconds) when the result came back
    duration_s: float = 0.0  # how long the env's reset/step took
    annotations: dict[str, Any] = field(default_factory=dict)


def _read_lines(path: str) -> tuple[list[dict[str, Any]], bool]:
    """Complete records of a ``steps.jsonl``, and whether a torn last line was dropped."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    records: list[dict[str, Any]] = []
    torn = bool(tail)
    for n, raw in enumerate(lines, 1):
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict) or "type" not in rec:
                raise ValueError("not a record object")
        except ValueError as e:
            if n == len(lines) and not tail:
                torn = True  # a last line that is complete but garbled: also a torn write
                break
            raise CorruptEpisodeError(f"{path}: line {n} is not a valid record ({e})") from e
        records.append(rec)
    return records, torn


class Episode:
    """A recorded episode, read from its directory.

    Raises :class:`EpisodeNotFoundError` if ``path`` is not a directory and
    :class:`CorruptEpisodeError` if its files are missing or malformed. An
    episode without its end record (the recorder crashed or still records) is
    ``complete == False`` with outcome ``incomplete``; a torn last line is ignored.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise EpisodeNotFoundError(f"no episode directory at {self.path}")
        meta_path = os.path.join(self.path, F.META_FILE)
        steps_path = os.path.join(self.path, F.STEPS_FILE)
        try:
            with open(meta_path, "rb") as f:
                meta = json.loads(f.read())
            self.meta = F.EpisodeMeta.from_json(meta)
        except FileNotFoundError:
            raise CorruptEpisodeError(
                f"{self.path} is not a complete episode directory: {F.META_FILE} is missing"
            ) from None
        except (ValueError, TypeError) as e:
            raise CorruptEpisodeError(f"{meta_path} is malformed: {e}") from e
        if self.meta.format_version > F.FORMAT_VERSION:
            raise CorruptEpisodeError(
                f"{self.path} has format version {self.meta.format_version}; this farm reads "
                f"up to {F.FORMAT_VERSION}"
            )
        try:
            records, self.torn_tail = _read_lines(steps_path)
        except FileNotFoundError:
            raise CorruptEpisodeError(
                f"{self.path} is truncated: {F.STEPS_FILE} is missing"
            ) from None
        self.steps: list[StepRecord] = []
        self.end: dict[str, Any] | None = None
        for rec in records:
            kind = rec["type"]
            if kind == "reset":
                self.steps = [_step(rec, 0)]
            elif kind == "step":
                if not self.steps:
                    raise CorruptEpisodeError(f"{steps_path}: a step record before the reset")
                self.steps.append(_step(rec, len(self.steps)))
            elif kind == "annotation":
                i = int(rec.get("i", -1))
                if 0 <= i < len(self.steps):
                    self.steps[i].annotations.update(rec.get("data") or {})
            elif kind == "end":
                self.end = {k: v for k, v in rec.items() if k != "type"}
        if not self.steps:
            # a recorder that died between creating the directory and the first record
            self.end = None

    # ------------------------------------------------------------ summary

    @property
    def episode_id(self) -> str:
        return self.meta.episode_id

    @property
    def complete(self) -> bool:
        return self.end is not None

    @property
    def outcome(self) -> str:
        return str(self.end.get("outcome", "incomplete")) if self.end else "incomplete"

    @property
    def num_steps(self) -> int:
        """Steps after the reset."""
        return max(0, len(self.steps) - 1)

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    def summary(self) -> dict[str, Any]:
        """The row ``farm episodes ls --json`` prints for this episode."""
        m = self.meta
        first = self.steps[0].t if self.steps else None
        last = self.steps[-1].t if self.steps else None
        return {
            "episode_id": m.episode_id,
            "path": self.path,
            "env_id": m.env_id,
            "task": m.task or m.env_id,
            "kind": m.kind,
            "seed": m.seed,
            "job": m.job,
            "created": m.created,
            "steps": self.num_steps,
            "return": self.total_reward,
            "outcome": self.outcome,
            "complete": self.complete,
            "duration_s": (last - first) if first is not None and last is not None else None,
            "end_reason": (self.end or {}).get("reason"),
        }

    # ------------------------------------------------------------ values

    def frame(self, h: str, *, step: int | None = None) -> np.ndarray:
        """The image of frame ``h`` (MissingFrameError names the file and the step)."""
        path = F.frame_path(self.path, h)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            where = f" (referenced by step {step})" if step is not None else ""
            raise MissingFrameError(
                f"episode {self.episode_id}: frame file {path} is missing{where}"
            ) from None
        try:
            return decode_png(data)
        except Exception as e:
            raise CorruptEpisodeError(f"frame file {path} is not a readable PNG: {e}") from e

    def frame_bytes(self, h: str) -> bytes:
        path = F.frame_path(self.path, h)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise MissingFrameError(
                f"episode {self.episode_id}: frame file {path} is missing"
            ) from None

    def observation(self, i: int) -> Any:
        """The decoded observation after step ``i`` (0: the reset's), frames loaded."""
        rec = self.steps[i]

        def load(h: str) -> np.ndarray:
            return self.frame(h, step=i)

        return F.decode_value(rec.obs, load)

    def action(self, i: int) -> Any:
        """The decoded action of step ``i`` (>= 1)."""
        return F.decode_value(self.steps[i].action)

    def frame_refs(self, i: int) -> list[str]:
        """Frame hashes the observation of step ``i`` references, in order."""
        out: list[str] = []

        def walk(v: Any) -> None:
            if isinstance(v, dict):
                if "$frame" in v:
                    out.append(v["$frame"])
                else:
                    for x in v.values():
                        walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        walk(self.steps[i].obs)
        return out

    def missing_frames(self) -> list[tuple[int, str]]:
        """``(step, hash)`` of every referenced frame file that is not on disk."""
        return [
            (i, h)
            for i in range(len(self.steps))
            for h in self.frame_refs(i)
            if not os.path.exists(F.frame_path(self.path, h))
        ]

    def obs_field(self, i: int, key: str) -> Any:
        """One undecoded field of a Dict observation (``text``, ``instruction``), or None."""
        obs = self.steps[i].obs
        if isinstance(obs, dict) and "$dict" in obs:
            return obs["$dict"].get(key)
        return None


def _step(rec: dict[str, Any], index: int) -> StepRecord:
    return StepRecord(
        index=index,
        obs=rec.get("obs"),
        info=rec.get("info") or {},
        action=rec.get("action"),
        reward=float(rec.get("reward", 0.0)),
        terminated=bool(rec.get("terminated", False)),
        truncated=bool(rec.get("truncated", False)),
        t=float(rec.get("t", 0.0)),
        duration_s=float(rec.get("duration_s", 0.0)),
        annotations=dict(rec.get("annotations") or {}),
    )
