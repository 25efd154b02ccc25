"""``farm serve ENV``: serve one environment as a gRPC endpoint."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from farm.errors import ConfigError
from farm.server import Server, ServerConfig, serve_until_signal


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve an environment over gRPC",
        description="Serve ENV (a farm env id like toy/text-task, a gymnasium id like "
        "CartPole-v1, or module:factory) as a farm.v1.Environment endpoint.",
    )
    p.add_argument("env", metavar="ENV")
    p.add_argument(
        "--address",
        default="127.0.0.1:0",
        help="unix:///path or HOST:PORT (default 127.0.0.1:0, a free port)",
    )
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="reap sessions idle for this long (default 300)",
    )
    p.add_argument(
        "--executor",
        choices=["thread", "inline"],
        default="thread",
        help="how sync envs run unless they declare it (default thread)",
    )
    p.add_argument(
        "--env-kwargs", default="{}", metavar="JSON", help="keyword arguments for the env"
    )
    p.add_argument(
        "--token",
        default=os.environ.get("FARM_TOKEN"),
        help="require this shared token (default: $FARM_TOKEN)",
    )
    p.add_argument("--max-message-mb", type=float, default=64.0)
    p.add_argument("--allow-remote", action="store_true", help="permit non-loopback addresses")
    p.add_argument("--ready-file", help="write the bound address to this file once serving")
    p.add_argument(
        "--record",
        metavar="DIR",
        help="record every episode into the episode store DIR (see `farm episodes`)",
    )
    p.add_argument(
        "--record-job",
        metavar="NAME",
        default=os.environ.get("FARM_JOB"),
        help="tag recorded episodes with this job name (default: $FARM_JOB)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--env-kwargs is not valid JSON: {e}") from e
    if not isinstance(env_kwargs, dict):
        raise ConfigError("--env-kwargs must be a JSON object")
    config = ServerConfig(
        address=args.address,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        executor=args.executor,
        token=args.token,
        max_message_bytes=int(args.max_message_mb * (1 << 20)),
        allow_remote=args.allow_remote,
        record_dir=args.record,
        record_job=args.record_job,
    )
    server = Server(args.env, config, env_kwargs=env_kwargs)

    def ready(address: str) -> None:
        print(f"farm: serving {args.env} at {address}", flush=True)
        if args.ready_file:
            tmp = args.ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(address)
            os.replace(tmp, args.ready_file)

    asyncio.run(serve_until_signal(server, ready))
    print("farm: server stopped", file=sys.stderr, flush=True)
    return 0
