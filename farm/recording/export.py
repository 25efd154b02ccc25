"""Export episodes to Parquet shards: one row per step (``farm episodes export``).

Row 0 of an episode is its reset (no action). Frames are exported by reference
(``frame_path``: the absolute path of the PNG in the store) or inline
(``frame_png``: the PNG bytes). Needs ``pyarrow`` (the ``export`` extra).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Literal

from farm.errors import ConfigError, MissingExtraError
from farm.recording import format as F
from farm.recording.reader import Episode
from farm.recording.replay import action_text

FrameMode = Literal["ref", "inline", "none"]


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingExtraError("pyarrow", "export") from e
    return pa, pq


def schema(frames: FrameMode) -> Any:
    pa, _ = _pyarrow()
    fields = [
        ("episode_id", pa.string()),
        ("env_id", pa.string()),
        ("task", pa.string()),
        ("seed", pa.int64()),
        ("job", pa.string()),
        ("outcome", pa.string()),
        ("step", pa.int32()),
        ("action", pa.string()),
        ("reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("t", pa.float64()),
        ("duration_s", pa.float64()),
        ("text", pa.string()),
        ("instruction", pa.string()),
        ("observation_json", pa.string()),
        ("info_json", pa.string()),
        ("annotations_json", pa.string()),
        ("frame_hash", pa.string()),
    ]
    if frames == "ref":
        fields.append(("frame_path", pa.string()))
    elif frames == "inline":
        fields.append(("frame_png", pa.binary()))
    return pa.schema(fields, metadata={"farm.episode_format": str(F.FORMAT_VERSION)})


def episode_rows(episode: Episode, frames: FrameMode) -> list[dict[str, Any]]:
    m = episode.meta
    rows = []
    for i, rec in enumerate(episode.steps):
        refs = episode.frame_refs(i)
        text = episode.obs_field(i, "text")
        instruction = episode.obs_field(i, "instruction")
        row: dict[str, Any] = {
            "episode_id": m.episode_id,
            "env_id": m.env_id,
            "task": m.task or m.env_id,
            "seed": m.seed,
            "job": m.job,
            "outcome": episode.outcome,
            "step": i,
            "action": action_text(episode.action(i)) if i > 0 else None,
            "reward": rec.reward,
            "terminated": rec.terminated,
            "truncated": rec.truncated,
            "t": rec.t,
            "duration_s": rec.duration_s,
            "text": text if isinstance(text, str) else None,
            "instruction": instruction if isinstance(instruction, str) else None,
            "observation_json": json.dumps(rec.obs, ensure_ascii=False),
            "info_json": json.dumps(rec.info, ensure_ascii=False),
            "annotations_json": json.dumps(rec.annotations, ensure_ascii=False)
            if rec.annotations
            else None,
            "frame_hash": refs[0] if refs else None,
        }
        if frames == "ref":
            row["frame_path"] = F.frame_path(episode.path, refs[0]) if refs else None
            if refs and not os.path.exists(row["frame_path"]):
                episode.frame_bytes(refs[0])  # raises MissingFrameError naming the file
        elif frames == "inline":
            row["frame_png"] = episode.frame_bytes(refs[0]) if refs else None
        rows.append(row)
    return rows


def export_parquet(
    episodes: Iterable[str],
    out_dir: str,
    *,
    frames: FrameMode = "ref",
    shard_rows: int = 50_000,
    progress: bool = True,
) -> list[str]:
    """Write the episodes (directories) as ``out_dir/part-NNNNN.parquet``; returns the shards."""
    if frames not in ("ref", "inline", "none"):
        raise ConfigError(f"frames must be 'ref', 'inline' or 'none', got {frames!r}")
    if shard_rows < 1:
        raise ConfigError(f"shard_rows must be >= 1, got {shard_rows}")
    pa, pq = _pyarrow()
    paths = list(episodes)
    sch = schema(frames)
    os.makedirs(out_dir, exist_ok=True)
    shards: list[str] = []
    buffer: list[dict[str, Any]] = []

    def flush() -> None:
        if not buffer:
            return
        path = os.path.join(out_dir, f"part-{len(shards):05d}.parquet")
        table = pa.Table.from_pylist(buffer, schema=sch)
        pq.write_table(table, path + ".tmp", compression="zstd")
        os.replace(path + ".tmp", path)
        shards.append(path)
        buffer.clear()

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("exporting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not progress,
        transient=True,
    ) as bar:
        task = bar.add_task("episodes", total=len(paths))
        for path in paths:
            buffer.extend(episode_rows(Episode(path), frames))
            while len(buffer) >= shard_rows:
                rest = buffer[shard_rows:]
                del buffer[shard_rows:]
                flush()
                buffer.extend(rest)
            bar.advance(task)
        flush()
    return shards
