"""Helpers shared by ``farm up``, ``farm status`` and ``farm down``."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from farm.proto import control_pb2 as pb


@dataclass
class Target:
    """Which farm a command means: its control address and, if known, its state dir."""

    address: str
    state_dir: Path | None


def add_target_args(p: Any) -> None:
    p.add_argument("-f", "--file", metavar="FARM_YAML", help="the farm spec (its control address)")
    p.add_argument(
        "--address", help="the control address (default: <$FARM_HOME or ~/.farm>/control.sock)"
    )


def resolve_target(args: argparse.Namespace) -> Target:
    from orchestration.spec import default_control_address, load_spec, resolve_state_dir

    if args.address:
        return Target(args.address, None)
    if args.file:
        spec = load_spec(args.file)
        return Target(spec.control_address, spec.state_path)
    state = resolve_state_dir()
    return Target(default_control_address(state), state)


def default_spec_path() -> str | None:
    for name in ("farm.yaml", "farm.yml"):
        if os.path.exists(name):
            return name
    return None


def table_console() -> Console:
    """A console for tables on stdout: wide enough when stdout is not a terminal."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=160)


def _uptime(s: float) -> str:
    if s <= 0:
        return "-"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{s % 3600 // 60:02.0f}m"


_STATE_STYLE = {
    "healthy": "green",
    "leased": "cyan",
    "starting": "yellow",
    "restarting": "yellow",
    "unhealthy": "red",
    "stopped": "dim",
}


def status_table(status: pb.StatusResponse) -> Table:
    title = f"farm at {status.control_address}"
    if status.metrics_address:
        title += f" (metrics http://{status.metrics_address}/metrics)"
    table = Table(
        "kind",
        "id",
        "backend",
        "endpoint",
        "state",
        "health",
        "leases",
        "restarts",
        "uptime",
        title=title,
    )
    for s in status.sandboxes:
        style = _STATE_STYLE.get(s.state, "")
        leases = f"{s.leases_total}" + (f" (held by {s.holder})" if s.lease_id else "")
        restarts = str(s.restarts) + (f" +{s.resets} resets" if s.resets else "")
        table.add_row(
            s.kind,
            s.id,
            s.backend,
            s.endpoint or "-",
            f"[{style}]{s.state}[/{style}]" if style else s.state,
            s.health,
            leases,
            restarts,
            _uptime(s.uptime_s),
        )
    return table


def status_dict(status: pb.StatusResponse) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(
        status, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
