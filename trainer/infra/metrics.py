"""Training metrics: a JSONL log (one record per learner step and per evaluation),
TensorBoard scalars (when the ``tensorboard`` package is there) and, at the end, a
learning-curve PNG (matplotlib)."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("farm.trainer.metrics")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class MetricsLog:
    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - held open for the job
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                log.info("tensorboard is not installed: metrics go to %s only", self.path)

    def write(self, kind: str, step: int, data: dict[str, Any]) -> None:
        record = {"kind": kind, "step": step, "time": time.time(), **_clean(data)}
        self._file.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in _flat(data):
                self._tb.add_scalar(f"{kind}/{key}", value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _flat(data: dict[str, Any], prefix: str = "") -> list[tuple[str, float]]:
    out = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(float(v))):
            out.append((key, float(v)))
        elif isinstance(v, dict):
            out.extend(_flat(v, key + "/"))
    return out


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_learning_curve(run_dir: Path, title: str = "") -> Path | None:
    """``learning_curve.png``: greedy eval success per task and on average, and the
    rolling training success, against wall-clock minutes."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no learning-curve PNG")
        return None
    records = read(run_dir / "metrics.jsonl")
    evals = [r for r in records if r["kind"] == "eval"]
    trains = [r for r in records if r["kind"] == "train"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    if evals:
        xs = [r["elapsed_s"] / 60 for r in evals]
        tasks = sorted({t for r in evals for t in r.get("per_task", {})})
        for t in tasks:
            ax1.plot(xs, [r["per_task"].get(t) for r in evals], alpha=0.45, marker=".", label=t)
        ax1.plot(xs, [r["success"] for r in evals], color="black", lw=2.5, marker="o", label="mean")
        ax1.axhline(0.8, color="grey", ls="--", lw=1)
    ax1.set(
        xlabel="wall-clock minutes", ylabel="greedy success (held-out seeds)", ylim=(-0.02, 1.02)
    )
    ax1.set_title("evaluation")
    if evals:
        ax1.legend(fontsize=7, loc="lower right")
    if trains:
        xs = [r["elapsed_s"] / 60 for r in trains]
        ax2.plot(xs, [r.get("train_success") for r in trains], label="train success (rolling)")
        ax2.plot(xs, [r.get("learner_utilisation") for r in trains], label="learner utilisation")
    ax2.set(xlabel="wall-clock minutes", ylim=(-0.02, 1.02))
    ax2.set_title("training")
    if trains:
        ax2.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    out = run_dir / "learning_curve.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
