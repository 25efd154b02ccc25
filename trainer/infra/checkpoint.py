"""Checkpoints: everything a killed job needs to continue where it stood: weights and
optimiser, policy version, staleness accounting, curriculum state, counters, eval
history. Written at learner-step boundaries, atomically (temp file, fsync, rename;
then the ``latest`` pointer the same way), keeping the newest ``keep``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainer.errors import TrainerError
from trainer.util import require_torch


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def save(run_dir: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    torch = require_torch()
    cdir = run_dir / "checkpoints"
    cdir.mkdir(parents=True, exist_ok=True)
    path = cdir / f"step-{step:07d}.pt"
    _atomic_write(path, lambda f: torch.save(state, f))
    pointer = json.dumps({"step": step, "file": path.name}).encode()
    _atomic_write(cdir / "latest.json", lambda f: f.write(pointer))
    for old in sorted(cdir.glob("step-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
    return path


def latest(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest.json"
    if not pointer.exists():
        return None
    try:
        name = json.loads(pointer.read_text())["file"]
    except (ValueError, KeyError) as e:
        raise TrainerError(f"{pointer} is damaged: {e}") from None
    path = pointer.parent / name
    if not path.exists():
        raise TrainerError(f"{pointer} names {name}, which does not exist")
    return path


def load(path: Path) -> dict[str, Any]:
    torch = require_torch()
    return torch.load(path, map_location="cpu", weights_only=False)
