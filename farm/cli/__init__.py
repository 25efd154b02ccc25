"""The ``farm`` command line. Each subcommand lives in its own module here."""

from __future__ import annotations

import argparse
import logging
import sys

from farm import __version__
from farm.errors import FarmError

_COMMANDS = (
    "serve", "demo", "envs", "describe", "health", "up", "status", "down", "doctor",
    "episodes", "replay", "images", "submit",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from farm.cli import (
        demo,
        doctor,
        down,
        episodes,
        images,
        inspect,
        replay,
        serve,
        status,
        submit,
        up,
    )  # fmt: skip

    parser = argparse.ArgumentParser(
        prog="farm", description="An asynchronous online environment farm for GUI-agent RL."
    )
    parser.add_argument("--version", action="version", version=f"farm {__version__}")
    parser.add_argument(
        "--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default), ERROR"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve.add_parser(sub)
    demo.add_parser(sub)
    inspect.add_parsers(sub)
    up.add_parser(sub)
    status.add_parser(sub)
    down.add_parser(sub)
    doctor.add_parser(sub)
    episodes.add_parser(sub)
    replay.add_parser(sub)
    images.add_parser(sub)
    submit.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args) or 0)
    except FarmError as e:
        print(f"farm: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
