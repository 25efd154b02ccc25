"""Comparing a replayed step with its recording."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from farm.recording import format as F


@dataclass(frozen=True)
class Tolerance:
    """How close a replayed step must be to count as reproduced.

    Screenshots match when the mean absolute difference (0..255 scale) is at
    most ``max_mean_abs_diff`` and the fraction of pixels differing by more
    than ``pixel_threshold`` in some channel is at most ``max_diff_fraction``.
    Rewards match within ``reward_atol``. Observation fields in ``lenient_keys``
    are compared and reported, but a difference does not fail the replay
    (``metadata`` holds URLs and sandbox details, not task state).
    """

    max_mean_abs_diff: float = 2.0
    max_diff_fraction: float = 0.01
    pixel_threshold: int = 16
    reward_atol: float = 1e-6
    lenient_keys: tuple[str, ...] = ("metadata",)


@dataclass
class ImageDiff:
    key: str
    mean_abs_diff: float
    diff_fraction: float
    ok: bool


@dataclass
class StepComparison:
    """One step of a replay against its recording (index 0 is the reset)."""

    index: int
    action: str
    reward: tuple[float, float | None]  # recorded, replayed
    terminated: tuple[bool, bool | None]
    truncated: tuple[bool, bool | None]
    text_match: bool | None = None  # None: the observation has no text view
    text_diff: str | None = None
    images: list[ImageDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what fails reproduction
    notes: list[str] = field(default_factory=list)  # differences that do not fail it
    duration_s: tuple[float, float | None] = (0.0, None)

    @property
    def ok(self) -> bool:
        return not self.problems


def image_diff(key: str, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> ImageDiff:
    if a.shape != b.shape:
        return ImageDiff(key, 255.0, 1.0, False)
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    mean = float(d.mean())
    per_pixel = d.max(axis=-1) if d.ndim == 3 else d
    frac = float((per_pixel > tol.pixel_threshold).mean())
    return ImageDiff(
        key, mean, frac, mean <= tol.max_mean_abs_diff and frac <= tol.max_diff_fraction
    )


def _first_diff(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for n, (x, y) in enumerate(zip(la, lb, strict=False), 1):
        if x != y:
            return f"line {n}: recorded {x!r}, replayed {y!r}"
    return f"recorded {len(la)} lines, replayed {len(lb)}"


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, tuple | list) and not isinstance(value, str):
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{prefix}[{i}]"))
        return out
    return {prefix or "obs": value}


def compare_obs(recorded: Any, replayed: Any, tol: Tolerance, cmp: StepComparison) -> None:
    """Fill ``cmp`` with the differences of two decoded observations."""
    rec, new = _leaves(recorded), _leaves(replayed)
    for key in sorted(set(rec) | set(new)):
        lenient = key.split(".")[-1] in tol.lenient_keys
        sink = cmp.notes if lenient else cmp.problems
        if key not in rec or key not in new:
            sink.append(
                f"observation field {key} only in the {'recording' if key in rec else 'replay'}"
            )
            continue
        a, b = rec[key], new[key]
        if isinstance(a, np.ndarray) and F.is_frame(a):
            b = np.asarray(b)
            diff = image_diff(key, a, b, tol)
            cmp.images.append(diff)
            if not diff.ok:
                sink.append(
                    f"{key} differs: mean abs diff {diff.mean_abs_diff:.2f}, "
                    f"{diff.diff_fraction:.2%} of pixels"
                )
            continue
        if key == "text" or key.endswith(".text"):
            cmp.text_match = a == b
            if a != b:
                cmp.text_diff = _first_diff(str(a), str(b))
                sink.append(f"text view differs ({cmp.text_diff})")
            continue
        same = (
            np.array_equal(np.asarray(a), np.asarray(b))
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray)
            else a == b
        )
        if not same:
            sink.append(f"observation field {key} differs")
