"""``farm replay EPISODE``: re-run a recorded episode and compare; ``--html`` viewer."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="re-run a recorded episode and check it reproduces",
        description="Re-execute EPISODE's actions in a fresh env of the same id, kwargs and "
        "seed (in-process, or at --endpoint), compare every step (reward, termination, "
        "text view, screenshots within a tolerance). Exit 0 only if it reproduced.",
    )
    p.add_argument("episode", metavar="EPISODE", help="episode id, unique prefix, or path")
    p.add_argument("--store", metavar="DIR", help="the episode store (as `farm episodes`)")
    p.add_argument("--endpoint", metavar="ADDRESS", help="replay against this farm endpoint")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML viewer to OUT")
    p.add_argument("--no-run", action="store_true", help="do not re-execute; only write --html")
    p.add_argument(
        "--max-mean-diff",
        type=float,
        default=2.0,
        metavar="X",
        help="screenshot tolerance: mean abs difference, 0..255 (default 2)",
    )
    p.add_argument(
        "--max-diff-fraction",
        type=float,
        default=0.01,
        metavar="F",
        help="screenshot tolerance: fraction of differing pixels (default 0.01)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from farm.errors import ConfigError
    from farm.recording import EpisodeStore
    from farm.recording.compare import Tolerance
    from farm.recording.replay import replay
    from farm.recording.viewer import write_html

    if args.no_run and not args.html:
        raise ConfigError("--no-run only makes sense with --html")
    episode = EpisodeStore(args.store).open(args.episode)
    report = None
    if not args.no_run:
        tol = Tolerance(
            max_mean_abs_diff=args.max_mean_diff, max_diff_fraction=args.max_diff_fraction
        )
        report = replay(episode, endpoint=args.endpoint, tolerance=tol)
    if args.html:
        write_html(args.html, episode, report)
    if report is None:
        print(f"wrote {args.html}")
        return 0
    if args.json:
        out = asdict(report)
        out["reproduced"] = report.reproduced
        out["first_divergence"] = report.first_divergence
        print(json.dumps(out, indent=1, default=str))
    else:
        _print(report, episode, args.html)
    return 0 if report.reproduced else 1


def _print(report: Any, episode: Any, html: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"replay of {report.episode_id} ({report.env_id}, seed {report.seed}, "
        f"{report.target})"
    )
    for col in ("step", "action", "reward rec/new", "term/trunc rec/new", "text", "screen", "ok"):
        table.add_column(col)
    for s in report.steps:
        new_r = "-" if s.reward[1] is None else f"{s.reward[1]:g}"
        flags = f"{int(s.terminated[0])}{int(s.truncated[0])}/" + (
            "-" if s.terminated[1] is None else f"{int(s.terminated[1])}{int(bool(s.truncated[1]))}"
        )
        text = "-" if s.text_match is None else ("same" if s.text_match else "[red]differs[/]")
        screen = ", ".join(f"{d.mean_abs_diff:.2f}/{d.diff_fraction:.1%}" for d in s.images) or "-"
        ok = "[green]yes[/]" if s.ok else "[red]no[/]: " + "; ".join(s.problems)
        table.add_row(str(s.index), s.action, f"{s.reward[0]:g}/{new_r}", flags, text, screen, ok)
    console.print(table)
    for p in report.problems:
        console.print(f"[red]{p}[/]")
    if not report.complete:
        console.print(
            "[yellow]the recording is incomplete: replayed up to its last complete step[/]"
        )
    verdict = (
        "[green]reproduced[/]"
        if report.reproduced
        else (
            f"[red]NOT reproduced[/] (first divergence at step {report.first_divergence})"
            if report.first_divergence is not None
            else "[red]NOT reproduced[/]"
        )
    )
    console.print(f"{verdict}: {len(report.steps) - 1} of {report.recorded_steps} steps replayed")
    if html:
        console.print(f"viewer: {html}")
