"""``farm envs``, ``farm describe ADDRESS``, ``farm health ADDRESS``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from rich.console import Console
from rich.table import Table


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("envs", help="list the farm env ids")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=envs)
    for name, func, text in (
        ("describe", describe, "show an endpoint's spaces and metadata"),
        ("health", health, "show an endpoint's health"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("address")
        p.add_argument("--token", default=os.environ.get("FARM_TOKEN"))
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)


def envs(args: argparse.Namespace) -> int:
    from farm.registry import registered

    entries = registered()
    if args.json:
        print(json.dumps([{"id": e.env_id, "description": e.description} for e in entries]))
        return 0
    table = Table("env id", "description", title="farm environments")
    for e in entries:
        table.add_row(e.env_id, e.description)
    Console().print(table)
    return 0


def describe(args: argparse.Namespace) -> int:
    from farm import codec
    from farm.client import describe as describe_rpc

    resp = asyncio.run(describe_rpc(args.address, token=args.token))
    obs = codec.space_from_proto(resp.env.observation_space)
    act = codec.space_from_proto(resp.env.action_space)
    meta = codec.decode_info(resp.env.metadata_json)
    if args.json:
        print(
            json.dumps(
                {
                    "env_id": resp.env.env_id,
                    "observation_space": str(obs),
                    "action_space": str(act),
                    "metadata": meta,
                    "protocol_versions": list(resp.protocol_versions),
                    "server_version": resp.server_version,
                }
            )
        )
        return 0
    table = Table(show_header=False, title=f"{args.address}")
    for k, v in (
        ("env", resp.env.env_id),
        ("observation space", str(obs)),
        ("action space", str(act)),
        ("metadata", json.dumps(meta)),
        ("protocol", ", ".join(resp.protocol_versions)),
        ("server", resp.server_version),
    ):
        table.add_row(k, v)
    Console().print(table)
    return 0


def health(args: argparse.Namespace) -> int:
    from google.protobuf.json_format import MessageToDict

    from farm.client import health as health_rpc

    resp = asyncio.run(health_rpc(args.address, token=args.token))
    data = MessageToDict(
        resp, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    if args.json:
        print(json.dumps(data))
    else:
        table = Table(show_header=False, title=f"{args.address}")
        for k, v in data.items():
            table.add_row(k, str(v))
        Console().print(table)
    return 0 if resp.status == resp.STATUS_SERVING else 1
