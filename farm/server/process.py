"""Servers as child processes: start one, wait until it serves, stop it.

:class:`ReadyFileProcess` is the mechanism (own process group, log file, a
ready file the child writes its bound address to); :class:`ServerProcess` runs
``farm serve ENV`` with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from farm.errors import SandboxUnavailableError


class ReadyFileProcess:
    """A child server that writes its address to a ready file once it serves.

    Subclasses give :meth:`command` (the argv, given the ready file's path).
    """

    name = "server"

    def __init__(
        self, *, startup_timeout_s: float = 30.0, environ: dict[str, str] | None = None
    ) -> None:
        self._timeout = startup_timeout_s
        self._environ = environ
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""
        self._tmp = tempfile.TemporaryDirectory(prefix="farm-proc-")
        self._log_path = os.path.join(self._tmp.name, "log")

    def command(self, ready_file: str) -> list[str]:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> str:
        ready = os.path.join(self._tmp.name, "ready")
        env = {**os.environ, **(self._environ or {})}
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(ready),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + self._timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.output()
                self.stop()
                raise SandboxUnavailableError(f"{self.name} did not start:\n{out}")
            time.sleep(0.02)
        with open(ready) as f:
            self.address = f.read().strip()
        return self.address

    def output(self) -> str:
        """What the server printed so far."""
        try:
            with open(self._log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server's process group (a crash, for tests)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self._tmp.cleanup()


class ServerProcess(ReadyFileProcess):
    """A ``farm serve ENV`` child process in its own process group.

    >>> with ServerProcess("toy/text-task", address="unix:///tmp/t.sock") as srv:
    ...     env = farm.connect(srv.address)
    """

    def __init__(
        self,
        env: str,
        *,
        address: str = "127.0.0.1:0",
        args: Sequence[str] = (),
        env_kwargs: str | None = None,
        startup_timeout_s: float = 30.0,
        environ: dict[str, str] | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, environ=environ)
        self.env = env
        self.name = f"`farm serve {env}`"
        self._requested = address
        self._args = list(args)
        if env_kwargs is not None:
            self._args += ["--env-kwargs", env_kwargs]

    def command(self, ready_file: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "farm.cli",
            "serve",
            self.env,
            "--address",
            self._requested,
            "--ready-file",
            ready_file,
            *self._args,
        ]
