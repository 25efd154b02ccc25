"""``farm episodes ls|show|export|rm``: the episode store on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from farm.errors import ConfigError


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="DIR",
        help="the episode store (default: $FARM_EPISODES, else $FARM_HOME/episodes, "
        "else ~/.farm/episodes)",
    )


def _filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", help="env id or task (glob with *), e.g. 'miniwob/*'")
    p.add_argument(
        "--outcome",
        choices=["success", "failure", "truncated", "error", "abandoned", "incomplete", "corrupt"],
    )
    p.add_argument("--job", help="job name (glob with *)")
    p.add_argument("--since", metavar="DATE", help="recorded at or after (ISO date/time, UTC)")
    p.add_argument("--until", metavar="DATE", help="recorded at or before (ISO date/time, UTC)")
    p.add_argument("--limit", type=int, help="at most this many episodes")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "episodes",
        help="list, show, export and remove recorded episodes",
        description="The episode store (see docs/episode_format.md).",
    )
    esub = p.add_subparsers(dest="episodes_command", metavar="ACTION", required=True)

    ls = esub.add_parser("ls", help="list episodes")
    _store_arg(ls)
    _filter_args(ls)
    ls.add_argument("--json", action="store_true", help="one JSON array")
    ls.set_defaults(func=run_ls)

    show = esub.add_parser("show", help="one episode's summary and steps")
    _store_arg(show)
    show.add_argument("episode", metavar="EPISODE", help="episode id, unique prefix, or path")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)

    ex = esub.add_parser("export", help="export episodes to Parquet (one row per step)")
    _store_arg(ex)
    _filter_args(ex)
    ex.add_argument(
        "episodes", nargs="*", metavar="EPISODE", help="these episodes (default: all matching)"
    )
    ex.add_argument("--out", required=True, metavar="DIR", help="directory for part-NNNNN.parquet")
    ex.add_argument(
        "--frames",
        choices=["ref", "inline", "none"],
        default="ref",
        help="frames as paths into the store (default), inline PNG bytes, or none",
    )
    ex.add_argument("--shard-rows", type=int, default=50_000, metavar="N")
    ex.set_defaults(func=run_export)

    rm = esub.add_parser("rm", help="delete episodes")
    _store_arg(rm)
    rm.add_argument("episodes", nargs="+", metavar="EPISODE")
    rm.set_defaults(func=run_rm)


def _store(args: argparse.Namespace) -> Any:
    from farm.recording import EpisodeStore

    return EpisodeStore(args.store)


def _filter(args: argparse.Namespace) -> Any:
    from farm.recording import EpisodeFilter

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    return EpisodeFilter(
        task=args.task,
        outcome=args.outcome,
        job=args.job,
        since=args.since,
        until=args.until,
        limit=args.limit,
    )


def run_ls(args: argparse.Namespace) -> int:
    store = _store(args)
    rows = store.list(_filter(args))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} episodes in {store.root}")
    for col in ("episode", "task", "seed", "job", "steps", "return", "outcome", "recorded"):
        table.add_column(
            col,
            justify="right" if col in ("seed", "steps", "return") else "left",
            no_wrap=col == "episode",
        )
    style = {"success": "green", "failure": "red", "incomplete": "yellow", "corrupt": "bold red"}
    for r in rows:
        outcome = r["outcome"] or "?"
        table.add_row(
            r["episode_id"],
            r["task"] or "",
            "" if r["seed"] is None else str(r["seed"]),
            r["job"] or "",
            "" if r["steps"] is None else str(r["steps"]),
            "" if r["return"] is None else f"{r['return']:g}",
            f"[{style.get(outcome, 'default')}]{outcome}[/]",
            (r["created"] or "")[:19],
        )
    Console(width=max(Console().width, 140)).print(table)  # ids are never cut
    return 0


def run_show(args: argparse.Namespace) -> int:
    from farm.recording.replay import action_text

    episode = _store(args).open(args.episode)
    summary = episode.summary()
    steps = [
        {
            "step": s.index,
            "action": action_text(episode.action(s.index)) if s.index else None,
            "reward": s.reward,
            "terminated": s.terminated,
            "truncated": s.truncated,
            "duration_s": s.duration_s,
            "frames": episode.frame_refs(s.index),
            "annotations": s.annotations or None,
        }
        for s in episode.steps
    ]
    missing = episode.missing_frames()
    if args.json:
        meta = episode.meta.to_json()
        meta.pop("observation_space", None)
        meta.pop("action_space", None)
        out = {**summary, "meta": meta, "steps_detail": steps, "torn_tail": episode.torn_tail}
        out["missing_frames"] = [{"step": i, "frame": h} for i, h in missing]
        print(json.dumps(out, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    m = episode.meta
    console.print(f"[bold]{m.episode_id}[/]  {episode.path}")
    console.print(
        f"env {m.env_id}  task {m.task or '-'}  seed {m.seed}  job {m.job or '-'}  "
        f"recorded {m.created}"
    )
    console.print(
        f"outcome [bold]{episode.outcome}[/]  steps {episode.num_steps}  "
        f"return {episode.total_reward:g}"
        + (f"  reason {summary['end_reason']}" if summary["end_reason"] else "")
    )
    console.print("versions " + ", ".join(f"{k} {v}" for k, v in m.versions.items()))
    if episode.torn_tail:
        console.print("[yellow]a torn last line was ignored (the recorder was interrupted)[/]")
    if missing:
        console.print(f"[red]{len(missing)} frame file(s) missing, e.g. step {missing[0][0]}[/]")
    table = Table()
    for col in ("step", "action", "reward", "term", "trunc", "ms", "annotations"):
        table.add_column(col)
    for s in steps:
        table.add_row(
            str(s["step"]),
            s["action"] or "(reset)",
            f"{s['reward']:g}",
            "x" if s["terminated"] else "",
            "x" if s["truncated"] else "",
            f"{s['duration_s'] * 1000:.1f}",
            ", ".join(sorted(s["annotations"] or {})),
        )
    console.print(table)
    return 0


def run_export(args: argparse.Namespace) -> int:
    from farm.recording.export import export_parquet

    store = _store(args)
    if args.episodes:
        paths = [store.resolve(e) for e in args.episodes]
    else:
        paths = [r["path"] for r in store.list(_filter(args)) if r["outcome"] != "corrupt"]
    shards = export_parquet(
        paths,
        args.out,
        frames=args.frames,
        shard_rows=args.shard_rows,
        progress=sys.stderr.isatty(),
    )
    print(f"exported {len(paths)} episodes to {len(shards)} shard(s) in {args.out}")
    for s in shards:
        print(s)
    return 0


def run_rm(args: argparse.Namespace) -> int:
    store = _store(args)
    paths = [store.resolve(e) for e in args.episodes]  # resolve all before deleting any
    for path in paths:
        store.remove(path)
        print(f"removed {path}")
    store.list()  # drop their index rows
    return 0
