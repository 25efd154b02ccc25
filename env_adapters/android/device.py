"""One Android device through an adb server (``adbutils``), and the emulator console.

* :class:`AdbServer`: the adb server a sandbox uses, on ``127.0.0.1:port``
  (``adb -P PORT start-server`` binds loopback only); started with the system's
  ``adb`` when none answers, and started again when it died (``adb
  kill-server``, a crash).
* :class:`Device`: shell commands (``shell:``) and raw output (``exec:``) on one
  serial through adbutils' ``AdbClient``, each bounded by a timeout. A TCP
  serial (``HOST:PORT``) is connected with ``adb connect``. When the server is
  gone, the call starts it again, reconnects and retries once; when the device
  is offline or missing, a TCP device gets one reconnect (``disconnect`` +
  ``connect``: adb 29 does not reconnect by itself), an emulator serial waits
  ``offline_grace_s``; if it is still gone, :class:`DeviceGone` (a
  :class:`~env_adapters.gui.SandboxCrashed`) names the serial and the state.
* :class:`EmulatorConsole`: the emulator's telnet-style console
  (``auth``, ``avd snapshot load|save|list``, ``screenrecord screenshot``) on
  ``127.0.0.1:<console port>`` (5554 for ``emulator-5554``).

adbutils' own connection falls back to ``adb start-server`` on the default
port 5037 when its server does not answer; this module's client does not
(a sandbox must never start or use another server than its own).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from env_adapters.gui import SandboxCrashed
from farm.errors import ConfigError, FarmError, MissingExtraError

DEFAULT_SERVER_PORT = 5037


def _adbutils() -> Any:
    """``adbutils.errors`` (AdbError, AdbTimeout, AdbConnectionError) after importing adbutils."""
    try:
        import adbutils  # noqa: F401
        from adbutils import errors
    except ImportError as e:
        raise MissingExtraError("adbutils", "android") from e
    return errors


class AdbUnavailable(FarmError):
    """No adb binary, or its server cannot be started."""


class DeviceGone(SandboxCrashed):
    """The device is offline, missing, or does not answer; the episode cannot go on."""


def find_adb(path: str | None = None) -> str:
    """The adb binary: ``path``, ``$FARM_ADB``, or ``adb`` on ``$PATH``."""
    candidate = path or os.environ.get("FARM_ADB") or shutil.which("adb")
    if not candidate or not os.access(candidate, os.X_OK):
        raise AdbUnavailable(
            "no adb binary found (apt-get install adb, or set FARM_ADB to one); "
            "android sandboxes talk to their device through an adb server"
        )
    return candidate


class AdbServer:
    """A private adb server on ``127.0.0.1:port``.

    ``home`` (optional) becomes ``ANDROID_SDK_HOME`` of a server this object
    starts (its key and logs go there instead of ``~/.android``).
    """

    def __init__(
        self, port: int = DEFAULT_SERVER_PORT, adb: str | None = None, home: str | None = None
    ) -> None:
        self.port = port
        self._adb = adb
        self.home = home
        self.starts = 0
        self._lock = threading.Lock()

    @property
    def adb(self) -> str:
        return find_adb(self._adb)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("ADB_SERVER_SOCKET", None)
        env["ANDROID_ADB_SERVER_PORT"] = str(self.port)
        if self.home is not None:
            Path(self.home).mkdir(parents=True, exist_ok=True)
            env["ANDROID_SDK_HOME"] = self.home
            env["HOME"] = self.home
        return env

    def running(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1.0)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def run(self, *args: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
        """``adb -P PORT ARGS`` (the command line client of this server)."""
        return subprocess.run(
            [self.adb, "-P", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self._env(),
            check=False,
        )

    def ensure(self) -> bool:
        """Start the server if none answers; True if it had to be started."""
        with self._lock:
            if self.running():
                return False
            try:
                proc = self.run("start-server")
            except (OSError, subprocess.TimeoutExpired) as e:
                raise AdbUnavailable(f"cannot start an adb server on port {self.port}: {e}") from e
            if proc.returncode != 0 or not self.running():
                raise AdbUnavailable(
                    f"`adb -P {self.port} start-server` failed (exit {proc.returncode}): "
                    f"{(proc.stderr or proc.stdout).strip()[-300:]}"
                )
            self.starts += 1
            return True

    def kill(self) -> None:
        """Stop the server (``adb kill-server``); no error if none runs."""
        if self.running():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired, AdbUnavailable):
                self.run("kill-server", timeout_s=10)


def _client(server: AdbServer, timeout_s: float) -> Any:
    """An adbutils client of ``server`` whose connections never fall back to port 5037."""
    _adbutils()
    import adbutils
    from adbutils._adb import AdbConnection

    class _Connection(AdbConnection):  # type: ignore[misc, valid-type]
        def _safe_connect(self) -> Any:
            return self._create_socket()

    class _Client(adbutils.AdbClient):  # type: ignore[misc, valid-type, name-defined]
        def make_connection(self, timeout: float | None = None) -> Any:
            conn = _Connection(self.host, self.port)
            conn.conn.settimeout(timeout or timeout_s)
            return conn

    return _Client(host="127.0.0.1", port=server.port, socket_timeout=timeout_s)


_TCP_SERIAL = re.compile(r"^[\w.\-\[\]:]+:\d+$")


class Device:
    """Shell access to one device (see module doc).

    Args:
        serial: ``emulator-5554``, a USB serial, or ``HOST:PORT`` (connected with ``adb connect``).
        server: the adb server to use.
        timeout_s: bound of one command (output included).
        offline_grace_s: how long an offline device may take to come back before it is gone.
    """

    def __init__(
        self,
        serial: str,
        server: AdbServer,
        *,
        timeout_s: float = 15.0,
        offline_grace_s: float = 3.0,
    ) -> None:
        if not serial:
            raise ConfigError("an android sandbox needs a device serial (FARM_ANDROID_SERIAL)")
        self.serial = serial
        self.server = server
        self.timeout_s = timeout_s
        self.offline_grace_s = offline_grace_s
        self.tcp = bool(_TCP_SERIAL.match(serial)) and not serial.startswith("emulator-")
        self.events: list[str] = []  # recoveries since the last take_events()
        self._client: Any = None
        self._device: Any = None

    # ------------------------------------------------------------ connection

    def _handles(self) -> Any:
        if self._device is None:
            self._client = _client(self.server, self.timeout_s)
            self._device = self._client.device(self.serial)
        return self._device

    def state(self) -> str:
        """``device``, ``offline``, ``unauthorized``, ... or ``missing``."""
        errors = _adbutils()
        self._handles()
        try:
            for info in self._client.list():
                if info.serial == self.serial:
                    return str(info.state)
        except (errors.AdbError, OSError) as e:
            raise DeviceGone(f"adb server on port {self.server.port}: {e}") from None
        return "missing"

    def connect(self, timeout_s: float = 30.0) -> None:
        """Make sure the server runs and the device is online and booted."""
        try:
            if self.server.ensure():
                self.events.append(f"started the adb server on port {self.server.port}")
        except AdbUnavailable as e:
            raise DeviceGone(str(e)) from None
        self._handles()
        deadline = time.monotonic() + timeout_s
        reconnected_at = -1e9
        why = "not booted"
        while True:
            state = self.state()
            if state == "device":
                try:  # booted: an emulator answers adb long before its UI is up
                    if (
                        self._run("shell:getprop sys.boot_completed", self.timeout_s).strip()
                        == b"1"
                    ):
                        return
                    why = "has not finished booting"
                except (_Offline, _ServerDown) as e:
                    why = str(e)  # it went away again (a snapshot load): look again
                    if self.tcp and time.monotonic() - reconnected_at > 0.5:
                        self._tcp_reconnect()
                        reconnected_at = time.monotonic()
                        continue
            if time.monotonic() > deadline:
                if state != "device":
                    raise DeviceGone(self._gone_message(state, timeout_s))
                raise DeviceGone(f"device {self.serial} {why} (waited {timeout_s:g} s)")
            if (
                self.tcp
                and state in ("offline", "missing")
                and time.monotonic() - reconnected_at > 1
            ):
                self._tcp_reconnect()  # DeviceGone at once if nothing listens there
                reconnected_at = time.monotonic()
                continue
            time.sleep(0.05 if state != "device" else 0.2)

    def _gone_message(self, state: str, waited_s: float) -> str:
        what = {
            "missing": "is not known to the adb server",
            "offline": "is offline",
            "unauthorized": "refused this adb server's key (unauthorized); accept it on the "
            "device, or start the server with the key the device trusts",
        }.get(state, f"is in state {state!r}")
        return f"device {self.serial} {what} (waited {waited_s:g} s)"

    def _tcp_reconnect(self) -> None:
        errors = _adbutils()
        with contextlib.suppress(errors.AdbError, OSError):
            self._client.disconnect(self.serial)
        try:
            answer = self._client.connect(self.serial, timeout=self.timeout_s)
        except (errors.AdbError, OSError) as e:
            answer = str(e)
        if "authenticate" in answer:
            raise DeviceGone(
                f"device {self.serial} refused this adb server's key (unauthorized): "
                f"{answer.strip()}; accept it on the device, or start the server with the key "
                "the device trusts (its ~/.android/adbkey)"
            )
        if "connected" not in answer or "unable" in answer or "failed" in answer:
            raise DeviceGone(f"device {self.serial} does not answer: {answer.strip()}")

    # ------------------------------------------------------------ commands

    def shell(self, command: str, timeout_s: float | None = None) -> str:
        """Run ``command`` in the device's shell; its output (stdout and stderr) as text."""
        return self.call(f"shell:{command}", timeout_s).decode("utf-8", errors="replace")

    def exec_out(self, command: str, timeout_s: float | None = None) -> bytes:
        """Run ``command`` through ``exec:`` (raw bytes, as ``adb exec-out``)."""
        return self.call(f"exec:{command}", timeout_s)

    def call(self, service: str, timeout_s: float | None = None) -> bytes:
        """Open ``service`` on the device and read it to its end; recovers once (module doc)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return self._run(service, timeout_s)
        except _ServerDown:
            if self.server.ensure():
                self.events.append(
                    f"the adb server on port {self.server.port} was gone; restarted it"
                )
            self.connect(timeout_s=max(timeout_s, 5.0))
        except _Offline as e:
            self._recover_device(str(e))
        try:
            return self._run(service, timeout_s)
        except (_ServerDown, _Offline) as e:
            raise DeviceGone(f"device {self.serial}: {e}") from None

    def _recover_device(self, why: str) -> None:
        if self.tcp:
            try:
                self._tcp_reconnect()
            except DeviceGone as e:
                raise DeviceGone(f"device {self.serial} went away ({why}); {e}") from None
        deadline = time.monotonic() + self.offline_grace_s
        while time.monotonic() < deadline:
            if self.state() == "device":
                self.events.append(f"device {self.serial} came back after: {why}")
                return
            time.sleep(0.1)
        raise DeviceGone(f"device {self.serial} went away ({why}) and did not come back")

    def _run(self, service: str, timeout_s: float) -> bytes:
        errors = _adbutils()
        device = self._handles()
        try:
            conn = device.open_transport(timeout=timeout_s)
        except errors.AdbConnectionError as e:
            raise _ServerDown(str(e)) from None
        except errors.AdbTimeout as e:
            raise DeviceGone(f"adb server on port {self.server.port} did not answer: {e}") from None
        except errors.AdbError as e:
            raise _Offline(str(e)) from None
        except OSError as e:
            raise _ServerDown(str(e)) from None
        try:
            conn.send_command(service)
            conn.check_okay()
            return conn.read_until_close(encoding=None)
        except errors.AdbTimeout:
            raise DeviceGone(
                f"device {self.serial} did not finish {_clip(service)} within {timeout_s:g} s"
            ) from None
        except errors.AdbError as e:
            raise _Offline(str(e)) from None
        except TimeoutError:
            raise DeviceGone(
                f"device {self.serial} did not finish {_clip(service)} within {timeout_s:g} s"
            ) from None
        except OSError as e:
            raise _Offline(str(e)) from None
        finally:
            with contextlib.suppress(OSError):
                conn.conn.close()  # adbutils' close() sleeps 10 ms; the service already ended

    def take_events(self) -> list[str]:
        events, self.events = self.events, []
        return events

    def close(self) -> None:
        self._device = self._client = None


class _ServerDown(Exception):
    pass


class _Offline(Exception):
    pass


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


# ---------------------------------------------------------------- the console


class ConsoleError(FarmError):
    """The emulator console refused a command or cannot be reached."""


def console_port_of(serial: str) -> int | None:
    """The console port of an emulator serial (``emulator-5554`` -> 5554), else None."""
    m = re.fullmatch(r"emulator-(\d+)", serial)
    return int(m.group(1)) if m else None


def console_token(path: str | None = None) -> str | None:
    """The console auth token (``~/.emulator_console_auth_token``); None if there is none."""
    p = Path(path) if path else Path.home() / ".emulator_console_auth_token"
    try:
        return p.read_text().strip()
    except OSError:
        return None


class EmulatorConsole:
    """A client of the emulator console on ``127.0.0.1:port`` (one command at a time)."""

    def __init__(self, port: int, token: str | None = None, timeout_s: float = 20.0) -> None:
        self.port = port
        self.token = token
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._buf = b""
        self._lock = threading.Lock()

    def _read_reply(self) -> str:
        """Lines up to ``OK`` (returned without it) or ``KO: ...`` (raised)."""
        assert self._sock is not None
        while True:
            m = re.search(rb"(?:^|\r?\n)(OK|KO:[^\r\n]*)\r?\n", self._buf)
            if m is not None:
                body, status = self._buf[: m.start()], m.group(1).decode(errors="replace")
                self._buf = self._buf[m.end() :]
                if status.startswith("KO"):
                    raise ConsoleError(f"emulator console: {status[3:].strip()}")
                return body.decode(errors="replace")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConsoleError(f"emulator console on port {self.port} closed the connection")
            self._buf += chunk

    def _open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout_s)
        except OSError as e:
            raise ConsoleError(f"no emulator console on 127.0.0.1:{self.port}: {e}") from None
        self._sock, self._buf = sock, b""
        banner = self._read_reply()
        if "Authentication required" in banner:
            if self.token is None:
                self.close()
                raise ConsoleError(
                    "the emulator console wants its auth token (~/.emulator_console_auth_token)"
                )
            self._send(f"auth {self.token}")

    def _send(self, line: str) -> str:
        assert self._sock is not None
        self._sock.sendall(line.encode() + b"\r\n")
        return self._read_reply()

    def command(self, line: str) -> str:
        """Send one command; its output (ConsoleError if the console says KO)."""
        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._sock is None:
                        self._open()
                    return self._send(line)
                except ConsoleError as e:
                    self.close()
                    if attempt or "closed" not in str(e):
                        raise
                except OSError as e:  # a dropped connection: open a new one, once
                    self.close()
                    if attempt:
                        raise ConsoleError(f"emulator console on port {self.port}: {e}") from None
            raise AssertionError("unreachable")

    def snapshots(self) -> list[str]:
        """Tags of the snapshots the emulator has."""
        out = self.command("avd snapshot list")
        names = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] not in ("ID", "List"):  # rows: "--  TAG  SIZE ..."
                names.append(parts[1])
        return names

    def load_snapshot(self, name: str) -> None:
        self.command(f"avd snapshot load {name}")

    def save_snapshot(self, name: str) -> None:
        self.command(f"avd snapshot save {name}")

    def screenshot(self, directory: str) -> None:
        """Write a PNG of the screen into ``directory`` (on the emulator's host)."""
        self.command(f"screenrecord screenshot {directory}")

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock, self._buf = None, b""
