"""``farm status [--json]``: the sandboxes of a running farm (exit 1 if none runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from farm.cli._farm import (
    add_target_args,
    resolve_target,
    status_dict,
    status_table,
    table_console,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("status", help="show a running farm's sandboxes")
    add_target_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from orchestration.client import FarmClient
    from orchestration.errors import FarmNotRunningError

    target = resolve_target(args)
    try:
        with FarmClient(target.address) as client:
            status = client.status(timeout=5.0)
    except FarmNotRunningError:
        if args.json:
            print(json.dumps({"running": False, "control_address": target.address}))
        else:
            print(f"farm: nothing is running at {target.address}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"running": True, **status_dict(status)}))
    else:
        table_console().print(status_table(status))
    return 0
