"""What a desktop task sees of its sandbox: files, apps, windows, clipboard, liveness.

:class:`TaskContext` is handed to a task's ``setup`` and ``check``
(:mod:`env_adapters.desktop.tasks`): it writes files into the home directory,
launches apps and waits until their window is up and answering, and reads
real state for checkers (files, window titles, the clipboard through
``xclip``, processes).

Liveness: :meth:`TaskContext.ping` sends ``_NET_WM_PING`` (EWMH) to a window
whose client supports it and waits for the answer; a client that does not
answer within the timeout is hung (a busy loop, a stopped process). A window
answers only after it has handled every event queued before the ping, so a
ping is also how a step waits for an app to take in its input.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from Xlib import X
from Xlib import display as xdisplay
from Xlib import error as xerror
from Xlib.protocol import event

from env_adapters.desktop.a11y import Window, WindowView
from env_adapters.desktop.display import App, Desktop
from env_adapters.gui import SandboxCrashed
from env_adapters.gui.tasks import CheckerError
from farm.errors import FarmError


class AppFailure(FarmError):
    """An app the task needs crashed or hung: the episode ends truncated with this reason."""


@dataclass
class WatchedApp:
    """An app whose death or hang ends the episode (see :class:`AppFailure`)."""

    app: App
    wm_class: str
    window: int | None = None


@dataclass
class TaskContext:
    """The sandbox as tasks see it (see module doc)."""

    desktop: Desktop
    view: WindowView
    pinger: Pinger
    watched: list[WatchedApp] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.desktop.home

    def path(self, relative: str) -> Path:
        """``~/relative`` inside the sandbox's home."""
        return self.home / relative

    def write(self, relative: str, content: str, mode: int | None = None) -> Path:
        p = self.path(relative)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        if mode is not None:
            p.chmod(mode)
        return p

    # ------------------------------------------------------------ apps

    def launch(
        self,
        argv: Sequence[str],
        *,
        wm_class: str | None,
        watch: bool = True,
        timeout_s: float = 15.0,
    ) -> WatchedApp:
        """Start an app; with ``wm_class``, wait until its window is up, focused and answering."""
        app = self.desktop.launch(argv)
        watched = WatchedApp(app, wm_class or "")
        if watch:
            self.watched.append(watched)
        if wm_class is None:
            return watched
        deadline = time.monotonic() + timeout_s
        while True:
            status = app.exit_status()
            if status is not None:
                raise SandboxCrashed(f"{app.name} {status} at start: {app.log_tail()}")
            win = self._window_of(app, wm_class)
            if win is not None and not win.minimized:
                watched.window = win.xid
                break
            if time.monotonic() > deadline:
                raise SandboxCrashed(f"{app.name} showed no window within {timeout_s:g} s")
            time.sleep(0.01)
        self.focus(watched.window)
        self.pinger.ping(watched.window, max(0.5, deadline - time.monotonic()))
        return watched

    def _window_of(self, app: App, wm_class: str) -> Window | None:
        for win in self.view.snapshot().windows:
            if win.wm_class.lower() == wm_class.lower() and win.pid in (None, app.pid):
                return win
        return None

    def focus(self, xid: int, timeout_s: float = 3.0) -> None:
        """Activate a window and wait until the window manager says it is active."""
        self.view.activate(xid)
        deadline = time.monotonic() + timeout_s
        while self.view.active_id() != xid and time.monotonic() < deadline:
            time.sleep(0.005)

    def health(self, hang_timeout_s: float) -> None:
        """AppFailure if a watched app exited, is stopped, or does not answer a ping."""
        for w in self.watched:
            status = w.app.exit_status()
            if status is not None:
                tail = w.app.log_tail(300)
                raise AppFailure(
                    f"app {w.app.name} (pid {w.app.pid}) {status}" + (f": {tail}" if tail else "")
                )
            with contextlib.suppress(psutil.Error):
                if psutil.Process(w.app.pid).status() == psutil.STATUS_STOPPED:
                    raise AppFailure(f"app {w.app.name} (pid {w.app.pid}) is stopped (hung)")
            if w.window is not None and not self.pinger.ping(w.window, hang_timeout_s):
                raise AppFailure(
                    f"app {w.app.name} (pid {w.app.pid}) did not answer a ping within "
                    f"{hang_timeout_s:g} s (hung)"
                )

    # ------------------------------------------------------------ state for checkers

    def windows(self) -> tuple[Window, ...]:
        return self.view.snapshot().windows

    def titles(self, wm_class: str | None = None) -> list[str]:
        return [
            w.title
            for w in self.windows()
            if wm_class is None or w.wm_class.lower() == wm_class.lower()
        ]

    def clipboard(self, selection: str = "clipboard", timeout_s: float = 3.0) -> str | None:
        """The clipboard's text (``xclip -o``), or None when nothing owns it."""
        try:
            r = subprocess.run(
                ["xclip", "-o", "-selection", selection],
                env=self.desktop.environ(app=False),
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CheckerError(
                f"reading the {selection} selection timed out after {timeout_s:g} s "
                "(its owner does not answer)"
            ) from None
        if r.returncode != 0:
            return None
        return r.stdout.decode(errors="replace")

    def processes(self, match: Callable[[list[str]], bool]) -> list[psutil.Process]:
        """Live processes of this desktop whose command line satisfies ``match``."""
        found = []
        for pid in self.desktop.process_ids():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE and match(proc.cmdline()):
                    found.append(proc)
        return found


def _ignore_x_error(*_: object) -> None:
    """Asynchronous X errors (BadWindow for a window closed meanwhile) are expected."""


class Pinger:
    """``_NET_WM_PING`` on a connection of its own (see module doc)."""

    def __init__(self, display: str) -> None:
        self.d = xdisplay.Display(display)
        self.d.set_error_handler(_ignore_x_error)  # a ping to a window that just closed
        self.root = self.d.screen().root
        self.root.change_attributes(event_mask=X.SubstructureNotifyMask)
        self._protocols = self.d.intern_atom("WM_PROTOCOLS")
        self._ping = self.d.intern_atom("_NET_WM_PING")
        self._serial = 1
        self._supports: dict[int, bool] = {}

    def supports(self, xid: int) -> bool:
        if xid not in self._supports:
            try:
                win = self.d.create_resource_object("window", xid)
                protocols = win.get_wm_protocols() or []
            except xerror.XError:
                return False
            self._supports[xid] = self._ping in protocols
        return self._supports[xid]

    def ping(self, xid: int, timeout_s: float) -> bool:
        """True when the client of ``xid`` answered (or cannot be pinged), False if hung."""
        if not self.supports(xid):
            return True
        self._serial = (self._serial + 1) & 0x7FFFFFFF
        serial = self._serial
        try:
            win = self.d.create_resource_object("window", xid)
            ev = event.ClientMessage(
                window=win,
                client_type=self._protocols,
                data=(32, [self._ping, serial, xid, 0, 0]),
            )
            win.send_event(ev, event_mask=X.NoEventMask)
            self.d.flush()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                while self.d.pending_events():
                    e = self.d.next_event()
                    if (
                        e.type == X.ClientMessage
                        and e.client_type == self._protocols
                        and e.data[1][0] == self._ping
                        and e.data[1][1] == serial
                    ):
                        return True
                time.sleep(0.001)
        except xerror.BadWindow:
            return True  # the window is gone: nothing to be hung
        except (xerror.ConnectionClosedError, OSError) as e:
            raise SandboxCrashed(f"the X display went away: {e}") from None
        return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.d.close()
