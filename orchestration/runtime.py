"""Running a controller: in the foreground, as a daemon, or in a background thread.

``python -m orchestration.runtime --spec farm.yaml`` is the daemon ``farm up
--detach`` starts (in a session of its own, output in ``<state_dir>/logs/controller.log``):
it serves until SIGTERM/SIGINT or a Shutdown RPC, then stops every sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from farm.errors import FarmError
from farm.proto import control_pb2 as pb
from orchestration.controller import Controller
from orchestration.errors import FarmStartError
from orchestration.service import status_response
from orchestration.spec import FarmSpec, load_spec

START_FAILURES_FATAL = 3  # `farm up` gives up on a sandbox that failed to start this often in a row


def unhealthy_summary(status: pb.StatusResponse) -> str:
    counts: dict[str, int] = {}
    for s in status.sandboxes:
        counts[s.state] = counts.get(s.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def check_progress(status: pb.StatusResponse) -> bool:
    """True once every sandbox serves; raises FarmStartError if one keeps failing to start."""
    for s in status.sandboxes:
        if s.start_failures >= START_FAILURES_FATAL:
            raise FarmStartError(
                f"sandbox {s.id} failed to start {s.start_failures} times in a row; "
                f"last error:\n{s.last_error}"
            )
    if status.shutting_down:
        raise FarmStartError("the farm is shutting down")
    return all(s.state in ("healthy", "leased") for s in status.sandboxes)


async def wait_healthy(
    fetch: Callable[[], Awaitable[pb.StatusResponse]],
    changed: Callable[[float], Awaitable[None]],
    timeout_s: float,
    on_status: Callable[[pb.StatusResponse], None] | None = None,
) -> pb.StatusResponse:
    """Poll until every sandbox is healthy; FarmStartError on failure or timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        status = await fetch()
        if on_status is not None:
            on_status(status)
        if check_progress(status):
            return status
        if loop.time() > deadline:
            raise FarmStartError(
                f"not every sandbox became healthy within {timeout_s:g} s "
                f"({unhealthy_summary(status)})"
            )
        await changed(min(0.25, max(0.01, deadline - loop.time())))


async def serve(spec: FarmSpec, spec_path: str = "") -> None:
    """Run a controller until SIGTERM/SIGINT or a Shutdown RPC (the daemon's body)."""
    controller = Controller(spec, spec_path=spec_path)
    await controller.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.request_shutdown)
    await controller.wait()


class BackgroundController:
    """A controller on its own event loop in a daemon thread (tests, benchmarks).

    >>> with BackgroundController(spec) as bg:
    ...     bg.wait_healthy(60)
    ...     client = FarmClient(bg.address)
    """

    def __init__(self, spec: FarmSpec, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="farm-ctl")
        self._spec = spec
        self._kw = kw
        self.controller: Controller | None = None
        self.address = spec.control_address

    def run(self, coro: Any, timeout: float | None = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> BackgroundController:
        self._thread.start()

        async def make() -> Controller:
            c = Controller(self._spec, **self._kw)
            await c.start()
            return c

        try:
            self.controller = self.run(make())
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            raise
        return self

    def status(self) -> pb.StatusResponse:
        assert self.controller is not None
        c = self.controller

        async def get() -> pb.StatusResponse:
            return status_response(c)

        return self.run(get())

    def wait_healthy(self, timeout_s: float = 60.0) -> pb.StatusResponse:
        assert self.controller is not None
        c = self.controller

        async def fetch() -> pb.StatusResponse:
            return status_response(c)

        return self.run(wait_healthy(fetch, c.changed, timeout_s), timeout_s + 10)

    def stop(self) -> None:
        if self.controller is not None and self._thread.is_alive():
            self.run(self.controller.shutdown(), 120)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> BackgroundController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.runtime")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(serve(load_spec(args.spec), args.spec))
    except FarmError as e:
        print(f"farm controller: error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
