"""``farm up [-f farm.yaml] [--detach]``: start a farm and wait until it is healthy.

Foreground (default): the controller runs in this process until Ctrl-C,
SIGTERM or ``farm down``. ``--detach``: the controller runs as a daemon
(``python -m orchestration.runtime``, its own session, output in
``<state_dir>/logs/controller.log``, pid file ``<state_dir>/controller.json``);
this command returns once every sandbox is healthy. Either way, if a sandbox
fails to start 3 times in a row or ``--timeout`` passes first, the farm is
stopped and ``farm up`` exits 2 with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from farm.cli._farm import default_spec_path, status_table, table_console
from farm.errors import ConfigError
from farm.proto import control_pb2 as pb


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "up",
        help="start a farm of sandboxes (see orchestration/examples/farm.yaml)",
        description="Start the farm a spec describes and wait until every sandbox is healthy.",
    )
    p.add_argument("-f", "--file", metavar="FARM_YAML", help="the farm spec (default: ./farm.yaml)")
    p.add_argument("--detach", "-d", action="store_true", help="run the controller as a daemon")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="give up if not every sandbox is healthy by then (default 300)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from orchestration.spec import load_spec

    path = args.file or default_spec_path()
    if path is None:
        raise ConfigError(
            "no farm spec: give -f FARM_YAML (an example: orchestration/examples/farm.yaml)"
        )
    spec = load_spec(path)
    console = Console(stderr=True, quiet=args.quiet)
    if args.detach:
        return _detached(spec, os.path.abspath(path), args.timeout, console)
    return asyncio.run(_foreground(spec, os.path.abspath(path), args.timeout, console))


class _Bar:
    """A progress bar of healthy sandboxes."""

    def __init__(self, console: Console, total: int) -> None:
        self.progress = Progress(
            TextColumn("[bold]farm up"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("starting", total=total)

    def update(self, status: pb.StatusResponse) -> None:
        from orchestration.runtime import unhealthy_summary

        done = sum(s.state in ("healthy", "leased") for s in status.sandboxes)
        self.progress.update(self.task, completed=done, description=unhealthy_summary(status))


async def _until_healthy(
    fetch: Callable[[], Awaitable[pb.StatusResponse]],
    changed: Callable[[float], Awaitable[None]],
    total: int,
    timeout: float,
    console: Console,
) -> pb.StatusResponse:
    from orchestration.runtime import wait_healthy

    bar = _Bar(console, total)
    with bar.progress:
        return await wait_healthy(fetch, changed, timeout, bar.update)


async def _foreground(spec: Any, path: str, timeout: float, console: Console) -> int:
    from orchestration.controller import Controller
    from orchestration.errors import FarmStartError
    from orchestration.service import status_response

    controller = Controller(spec, spec_path=path)
    await controller.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.request_shutdown)

    async def fetch() -> pb.StatusResponse:
        return status_response(controller)

    try:
        status = await _until_healthy(
            fetch, controller.changed, len(controller.sandboxes), timeout, console
        )
    except FarmStartError as e:
        await controller.shutdown()
        if controller.stopping and "shutting down" in str(e):
            console.print("farm: stopped before every sandbox was healthy")
            return 130
        raise
    table_console().print(status_table(status))
    console.print(
        f"farm is up at {controller.address} (pid {os.getpid()}); Ctrl-C or `farm down` stops it"
    )
    await controller.wait()
    console.print("farm stopped")
    return 0


def _detached(spec: Any, path: str, timeout: float, console: Console) -> int:
    from farm.address import Address, unix_socket_in_use
    from orchestration.client import FarmClient
    from orchestration.errors import FarmAlreadyRunningError, FarmNotRunningError, FarmStartError

    address = spec.control_address
    addr = Address.parse(address)
    if addr.is_unix and unix_socket_in_use(addr.unix_path or ""):
        raise FarmAlreadyRunningError(
            f"a farm is already running at {address}; see `farm status`, stop it with `farm down`"
        )
    state: Path = spec.state_path
    (state / "logs").mkdir(parents=True, exist_ok=True)
    log_path = state / "logs" / "controller.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.runtime", "--spec", path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def died() -> str | None:
        if proc.poll() is None:
            return None
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-20:])
        return f"the farm controller exited with code {proc.returncode}:\n{tail}"

    # wait for the control endpoint
    deadline = time.monotonic() + 30.0
    client: FarmClient | None = None
    while client is None:
        why = died()
        if why:
            raise FarmStartError(why)
        if time.monotonic() > deadline:
            proc.kill()
            raise FarmStartError(f"the farm controller did not serve {address} within 30 s")
        try:
            client = FarmClient(address)
        except FarmNotRunningError:  # no socket file yet
            time.sleep(0.05)
            continue
        try:
            client.status(timeout=2.0)
        except FarmNotRunningError:  # not serving yet
            client.close()
            client = None
            time.sleep(0.05)

    async def fetch() -> pb.StatusResponse:
        why = died()
        if why:
            raise FarmStartError(why)
        return await asyncio.to_thread(client.status)

    async def changed(t: float) -> None:
        await asyncio.sleep(min(t, 0.2))

    try:
        total = sum(g.count for g in spec.sandboxes)
        status = asyncio.run(_until_healthy(fetch, changed, total, timeout, console))
    except (FarmStartError, KeyboardInterrupt):
        if proc.poll() is None:
            console.print("farm: stopping the farm")
            try:
                client.shutdown()
                proc.wait(120)
            except Exception:  # noqa: BLE001 - last resort below
                os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        client.close()
    table_console().print(status_table(status))
    console.print(
        f"farm is up at {address} (controller pid {proc.pid}, log {log_path}); "
        "`farm status` shows it, `farm down` stops it"
    )
    return 0
