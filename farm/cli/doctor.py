"""``farm doctor [-f farm.yaml] [--json]``: can this host run each sandbox kind?

Checks Chromium and Playwright (browser), Xvfb (desktop), /dev/kvm and adb
(android), the Docker daemon and the ray package (backends), and says what to
install. With a spec, only what it uses is checked. Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check this host's prerequisites for each sandbox kind")
    p.add_argument("-f", "--file", metavar="FARM_YAML", help="check only what this spec uses")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from orchestration.doctor import run_checks
    from orchestration.spec import load_spec

    targets = None
    if args.file:
        spec = load_spec(args.file)
        targets = spec.kinds + sorted(
            {f"backend:{g.backend}" for g in spec.sandboxes if g.backend != "local"}
        )
    checks = run_checks(targets)
    if args.json:
        print(json.dumps([asdict(c) for c in checks]))
    else:
        table = Table("for", "check", "status", "detail", "to fix", title="farm doctor")
        for c in checks:
            table.add_row(
                c.target,
                c.name,
                "[green]ok[/green]" if c.ok else "[red]missing[/red]",
                escape(c.detail),
                escape(c.fix),
            )
        Console().print(table)
    return 0 if all(c.ok for c in checks) else 1
