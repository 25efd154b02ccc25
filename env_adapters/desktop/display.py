"""One X11 desktop per sandbox: Xvfb, a window manager, a session D-Bus, and its apps.

:class:`Desktop` owns, under a private temporary directory:

* an **Xvfb** server on a display number of its own (``-displayfd``: the
  server picks the first free number itself, so concurrent sandboxes never
  race for one), with MIT-SHM for screenshots and XTEST for input;
* a **home directory** (``$HOME``, with ``XDG_CONFIG_HOME`` etc. inside it)
  restored from a template directory on every reset (:meth:`Desktop.restore_home`),
  and a private ``XDG_RUNTIME_DIR``;
* a **session D-Bus** (``dbus-daemon --session`` on a unix socket in the
  runtime dir); GSettings use the keyfile backend, so settings land in
  ``~/.config/glib-2.0/settings/keyfile``;
* an **accessibility bus** (AT-SPI: ``at-spi-bus-launcher`` from at-spi2-core,
  on the session bus; its bus socket lives in the private runtime dir): GTK
  apps find it through the session bus, so each desktop has its own
  accessibility tree (:mod:`env_adapters.desktop.atspi` reads it). It is not
  vital: if it dies, the sandbox goes on (the text view falls back to windows)
  and :meth:`Desktop.start_a11y_bus` starts a new one;
* a **window manager** (openbox);
* the **apps** (:meth:`Desktop.launch`), each in its own session / process group.

Every process of a desktop carries ``FARM_DESKTOP=<id>`` in its environment,
apps also ``FARM_DESKTOP_APP=1``; :meth:`Desktop.kill_apps` (reset) kills the
process groups of the apps it launched, then every process still carrying the
app tag (an app's children in other sessions, e.g. the shell of a terminal).
:meth:`Desktop.close` does the same for every process of the desktop, stops
Xvfb with SIGTERM (it removes its socket itself; if it had to be killed, the
socket is removed) and deletes the
temporary directory. Nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from env_adapters.gui import SandboxCrashed
from farm.errors import ConfigError

TAG = "FARM_DESKTOP"
APP_TAG = "FARM_DESKTOP_APP"

#: programs every desktop needs, with the Debian package that has each
REQUIRED_PROGRAMS: dict[str, str] = {
    "Xvfb": "xvfb",
    "openbox": "openbox",
    "dbus-daemon": "dbus",
    "xclip": "xclip",
}


#: the launcher of the accessibility bus (Debian's at-spi2-core; not on $PATH)
BUS_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"


def a11y_launcher_available() -> bool:
    return os.access(BUS_LAUNCHER, os.X_OK)


#: the apps of the task suite
APP_PROGRAMS: dict[str, str] = {
    "xterm": "xterm",
    "mousepad": "mousepad",
    "galculator": "galculator",
}


def missing_prerequisites() -> str | None:
    """What the desktop sandbox and its suite lack on this machine, or None."""
    import importlib.util

    missing = missing_programs({**REQUIRED_PROGRAMS, **APP_PROGRAMS})
    if not a11y_launcher_available():
        missing.append(BUS_LAUNCHER)  # at-spi2-core: the widget view
    modules = [m for m in ("Xlib", "mss", "jeepney") if importlib.util.find_spec(m) is None]
    if not missing and not modules:
        return None
    return (
        f"desktop prerequisites missing: programs {missing}, python modules {modules}; "
        "run scripts/bootstrap (it installs the apt packages and the `desktop` extra)"
    )


def missing_programs(programs: Iterable[str] = REQUIRED_PROGRAMS) -> list[str]:
    """The programs of ``programs`` not on ``$PATH``."""
    return [p for p in programs if shutil.which(p) is None]


def require_programs(programs: dict[str, str]) -> None:
    """ConfigError naming the Debian packages to install when a program is missing."""
    missing = missing_programs(programs)
    if missing:
        packages = " ".join(sorted({programs[p] for p in missing}))
        raise ConfigError(
            f"the desktop sandbox needs {', '.join(missing)} (install with "
            f"`apt-get install {packages}`, or run scripts/bootstrap)"
        )


@dataclass(frozen=True)
class DesktopConfig:
    """How a desktop is built.

    Attributes:
        width, height: screen size in pixels (= screenshot size).
        depth: colour depth of the Xvfb screen.
        window_manager: argv of the window manager (None: no window manager).
        dbus: start a session D-Bus (needed for AT-SPI and for GTK apps to behave).
        a11y: start the accessibility bus (AT-SPI) on it.
        start_timeout_s: bound of starting Xvfb, the bus and the window manager.
        extra_env: added to every app's environment.
    """

    width: int = 1280
    height: int = 720
    depth: int = 24
    window_manager: tuple[str, ...] | None = ("openbox", "--sm-disable")
    dbus: bool = True
    a11y: bool = True
    start_timeout_s: float = 15.0
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class App:
    """An app launched into a desktop."""

    name: str
    argv: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_status(self) -> str | None:
        """None while it runs, else how it ended ("exited with code 1", "killed by SIGKILL")."""
        code = self.proc.poll()
        if code is None:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE:
                    code = self.proc.wait(1)
        if code is None:
            return None
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def log_tail(self, limit: int = 600) -> str:
        try:
            data = self.log.read_bytes()[-limit:]
        except OSError:
            return ""
        return data.decode(errors="replace").strip()


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _dead(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _tagged(tag_value: str, *, apps_only: bool) -> list[psutil.Process]:
    """Processes of this user whose environment carries ``FARM_DESKTOP=tag_value``."""
    me, found = os.getuid(), []
    needle = f"{TAG}={tag_value}".encode()
    app_needle = f"{APP_TAG}=1".encode()
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != me or proc.pid == os.getpid():
                continue
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, psutil.Error):
            continue
        if needle in env and (not apps_only or app_needle in env):
            found.append(proc)
    return found


class Desktop:
    """Xvfb + window manager + session bus + apps, in a private directory (see module doc).

    Args:
        config: sizes, window manager, bus.
        home_template: copied to ``$HOME`` by :meth:`start` and every :meth:`restore_home`
            (None: an empty home).
    """

    def __init__(self, config: DesktopConfig | None = None, home_template: Path | None = None):
        self.config = config or DesktopConfig()
        self.home_template = home_template
        self.id = secrets.token_hex(6)
        self.root: Path | None = None
        self.display_number: int | None = None
        self.apps: list[App] = []
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._infra: list[subprocess.Popen[bytes]] = []
        self._a11y: subprocess.Popen[bytes] | None = None
        self.bus_address = ""
        self._logs: list[object] = []

    # ------------------------------------------------------------ paths and env

    @property
    def display(self) -> str:
        if self.display_number is None:
            raise SandboxCrashed("the desktop is not running")
        return f":{self.display_number}"

    @property
    def home(self) -> Path:
        assert self.root is not None
        return self.root / "home"

    @property
    def runtime_dir(self) -> Path:
        assert self.root is not None
        return self.root / "run"

    def environ(self, *, app: bool = True, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process in this desktop."""
        home = str(self.home)
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": home,
            "USER": os.environ.get("USER", "farm"),
            "LOGNAME": os.environ.get("USER", "farm"),
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            "DISPLAY": self.display,
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_CURRENT_DESKTOP": "farm",
            "GSETTINGS_BACKEND": "keyfile",
            "NO_AT_BRIDGE": "0",  # the GTK 3 AT-SPI bridge loads unless this is "1"
            "GTK_OVERLAY_SCROLLING": "0",
            "TERM": "xterm",
            TAG: self.id,
            **self.config.extra_env,
            **(extra or {}),
        }
        if self.bus_address:
            env["DBUS_SESSION_BUS_ADDRESS"] = self.bus_address
        if app:
            env[APP_TAG] = "1"
        return env

    # ------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._xvfb is not None and self._xvfb.poll() is None

    def check(self) -> None:
        """SandboxCrashed if Xvfb (or the window manager) is gone."""
        if self._xvfb is None:
            raise SandboxCrashed("the desktop is not running")
        code = self._xvfb.poll()
        if code is not None:
            raise SandboxCrashed(f"Xvfb on {self.display} exited ({code})")
        for proc in self._infra:
            if proc.poll() is not None:
                raise SandboxCrashed(f"{proc.args[0]} of display {self.display} exited")

    def start(self) -> None:
        """Start Xvfb, the session bus and the window manager; restore the home directory."""
        require_programs(REQUIRED_PROGRAMS)
        cfg = self.config
        self.root = Path(tempfile.mkdtemp(prefix=f"farm-desktop-{self.id}-"))
        self.runtime_dir.mkdir(mode=0o700)
        (self.root / "logs").mkdir()
        self.restore_home()
        try:
            self._start_xvfb()
            if cfg.dbus:
                self._start_bus()
                if cfg.a11y:
                    self.start_a11y_bus()
            if cfg.window_manager:
                self._infra.append(self._spawn(cfg.window_manager, "wm", app=False))
                self._wait_for_wm()
        except BaseException:
            self.close()
            raise

    def _spawn(
        self, argv: Sequence[str], log_name: str, *, app: bool, extra: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        assert self.root is not None
        log = open(self.root / "logs" / f"{log_name}.log", "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        try:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environ(app=app, extra=extra),
                cwd=str(self.home),
                start_new_session=True,
            )
        except OSError as e:
            raise SandboxCrashed(f"cannot start {argv[0]}: {e}") from e

    def _start_xvfb(self) -> None:
        cfg = self.config
        assert self.root is not None
        read_fd, write_fd = os.pipe()
        log = open(self.root / "logs" / "xvfb.log", "ab")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        argv = [
            "Xvfb",
            "-displayfd",
            str(write_fd),
            "-screen",
            "0",
            f"{cfg.width}x{cfg.height}x{cfg.depth}",
            "-nolisten",
            "tcp",
            "-noreset",
            "-dpi",
            "96",
            "+extension",
            "XTEST",
            "+extension",
            "MIT-SHM",
        ]
        try:
            self._xvfb = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), TAG: self.id},
            )
        finally:
            os.close(write_fd)
        deadline = time.monotonic() + cfg.start_timeout_s
        data = b""
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            os.set_blocking(pipe.fileno(), False)
            while not data.endswith(b"\n"):
                if self._xvfb.poll() is not None or time.monotonic() > deadline:
                    raise SandboxCrashed(
                        f"Xvfb did not start: {self._read_log('xvfb') or 'no output'}"
                    )
                try:
                    chunk = pipe.read()
                except BlockingIOError:
                    chunk = None
                if chunk:
                    data += chunk
                else:
                    time.sleep(0.005)
        self.display_number = int(data.strip())

    def _start_bus(self) -> None:
        address = f"unix:path={self.runtime_dir}/bus"
        proc = self._spawn(
            ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={address}"],
            "dbus",
            app=False,
        )
        self._infra.append(proc)
        deadline = time.monotonic() + self.config.start_timeout_s
        while not (self.runtime_dir / "bus").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SandboxCrashed(f"dbus-daemon did not start: {self._read_log('dbus')}")
            time.sleep(0.005)
        self.bus_address = address

    def start_a11y_bus(self) -> bool:
        """(Re)start the accessibility bus launcher; False when at-spi2-core is missing.

        Not one of the vital processes (:meth:`check` ignores it). Apps started
        afterwards connect to it; readiness is awaited by the AT-SPI client.
        """
        self.stop_a11y_bus()
        if not self.bus_address or not a11y_launcher_available():
            return False
        self._a11y = self._spawn(
            [BUS_LAUNCHER, "--launch-immediately", "--a11y=1"], "a11y", app=False
        )
        return True

    def stop_a11y_bus(self) -> None:
        """Kill the accessibility bus (the launcher, its bus daemon, the registry)."""
        proc, self._a11y = self._a11y, None
        if proc is None:
            return
        _kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(2)
        # the registry daemon is started by the bus in a session of its own
        for p in _tagged(self.id, apps_only=False):
            with contextlib.suppress(psutil.Error):
                if p.name() in ("at-spi2-registryd", "at-spi-bus-launcher"):
                    p.kill()

    @property
    def a11y_bus_pid(self) -> int | None:
        """Pid of the launcher while it runs."""
        if self._a11y is None or self._a11y.poll() is not None:
            return None
        return self._a11y.pid

    def _wait_for_wm(self) -> None:
        """Until the window manager owns the screen (``_NET_SUPPORTING_WM_CHECK`` is set)."""
        from Xlib import display as xdisplay

        d = xdisplay.Display(self.display)
        try:
            atom = d.intern_atom("_NET_SUPPORTING_WM_CHECK")
            deadline = time.monotonic() + self.config.start_timeout_s
            while d.screen().root.get_full_property(atom, 0) is None:
                wm = self._infra[-1]
                if wm.poll() is not None or time.monotonic() > deadline:
                    raise SandboxCrashed(
                        f"the window manager did not start: {self._read_log('wm')}"
                    )
                time.sleep(0.01)
        finally:
            d.close()

    def _read_log(self, name: str) -> str:
        if self.root is None:
            return ""
        try:
            return (self.root / "logs" / f"{name}.log").read_text(errors="replace")[-800:].strip()
        except OSError:
            return ""

    # ------------------------------------------------------------ home and apps

    def restore_home(self) -> None:
        """``$HOME`` := a fresh copy of the template (or empty)."""
        home = self.home
        if home.exists():
            shutil.rmtree(home, ignore_errors=True)
            if home.exists():  # a file an app is still writing: try once more
                shutil.rmtree(home)
        if self.home_template is not None:
            shutil.copytree(self.home_template, home, symlinks=True)
        else:
            home.mkdir()
        for sub in (".config", ".local/share", ".cache"):
            (home / sub).mkdir(parents=True, exist_ok=True)

    def launch(
        self, argv: Sequence[str], *, name: str | None = None, env: dict[str, str] | None = None
    ) -> App:
        """Start an app (own session / process group) with this desktop's environment."""
        self.check()
        name = name or Path(argv[0]).name
        log_name = f"app-{len(self.apps)}-{name}"
        proc = self._spawn(argv, log_name, app=True, extra=env)
        assert self.root is not None
        app = App(name, tuple(argv), proc, self.root / "logs" / f"{log_name}.log")
        self.apps.append(app)
        return app

    def kill_apps(self, timeout_s: float = 5.0) -> None:
        """Kill every app (their process groups, then anything else with the app tag)."""
        for app in self.apps:
            _kill_group(app.pid)
        deadline = time.monotonic() + timeout_s
        for app in self.apps:
            with contextlib.suppress(subprocess.TimeoutExpired):
                app.proc.wait(max(0.0, deadline - time.monotonic()))
        self.apps = []
        self._sweep(apps_only=True, deadline=deadline)

    def _sweep(self, *, apps_only: bool, deadline: float) -> None:
        procs = _tagged(self.id, apps_only=apps_only)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        # until each is gone or a zombie: a killed process that is not our child (a
        # terminal's shell) is reaped by pid 1, which may take a second or two
        end = max(deadline, time.monotonic() + 0.1)
        while procs and time.monotonic() < end:
            procs = [p for p in procs if not _dead(p)]
            if procs:
                time.sleep(0.005)

    def process_ids(self, *, apps_only: bool = False) -> list[int]:
        """Pids of the processes of this desktop (for checks and tests)."""
        return sorted(p.pid for p in _tagged(self.id, apps_only=apps_only))

    def close(self) -> None:
        """Stop everything and delete the private directory; never raises."""
        deadline = time.monotonic() + 5.0
        with contextlib.suppress(Exception):
            self.kill_apps()
        with contextlib.suppress(Exception):
            self.stop_a11y_bus()
        for proc in reversed(self._infra):
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2)
        self._infra = []
        if self._xvfb is not None:
            with contextlib.suppress(ProcessLookupError):
                self._xvfb.terminate()  # Xvfb removes its socket on SIGTERM
            try:
                self._xvfb.wait(3)
            except subprocess.TimeoutExpired:
                _kill_group(self._xvfb.pid)
                self._xvfb.wait(3)
            self._remove_display_files(self._xvfb.pid)
            self._xvfb = None
        with contextlib.suppress(Exception):
            self._sweep(apps_only=False, deadline=deadline)
        for log in self._logs:
            with contextlib.suppress(Exception):
                log.close()  # type: ignore[attr-defined]
        self._logs = []
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
        self.bus_address = ""

    def _remove_display_files(self, pid: int) -> None:
        """Remove the socket (and lock file, if any) of our display after our Xvfb died
        without cleaning up; not when a lock file names another server."""
        n = self.display_number
        if n is None:
            return
        lock = Path(f"/tmp/.X{n}-lock")
        try:
            owner: int | None = int(lock.read_text().strip())
        except FileNotFoundError:
            owner = None  # with -displayfd, Xvfb writes no lock file
        except (OSError, ValueError):
            return
        if owner in (None, pid):
            with contextlib.suppress(OSError):
                lock.unlink()
            with contextlib.suppress(OSError):
                Path(f"/tmp/.X11-unix/X{n}").unlink()

    def display_files(self) -> list[Path]:
        """The lock file and socket of this display that exist now."""
        n = self.display_number
        if n is None:
            return []
        return [p for p in (Path(f"/tmp/.X{n}-lock"), Path(f"/tmp/.X11-unix/X{n}")) if p.exists()]

    def __enter__(self) -> Desktop:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
