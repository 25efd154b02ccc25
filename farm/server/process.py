"""``farm serve`` as a child process: start it, wait until it serves, stop it."""

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


class ServerProcess:
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
        self.env = env
        self._requested = address
        self._args = list(args)
        if env_kwargs is not None:
            self._args += ["--env-kwargs", env_kwargs]
        self._timeout = startup_timeout_s
        self._environ = environ
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""
        self._tmp = tempfile.TemporaryDirectory(prefix="farm-serve-")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> str:
        ready = os.path.join(self._tmp.name, "ready")
        log_path = os.path.join(self._tmp.name, "log")
        cmd = [
            sys.executable,
            "-m",
            "farm.cli",
            "serve",
            self.env,
            "--address",
            self._requested,
            "--ready-file",
            ready,
            *self._args,
        ]
        env = {**os.environ, **(self._environ or {})}
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.monotonic() + self._timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.output()
                self.stop()
                raise SandboxUnavailableError(f"`farm serve {self.env}` did not start:\n{out}")
            time.sleep(0.02)
        with open(ready) as f:
            self.address = f.read().strip()
        return self.address

    def output(self) -> str:
        """What the server printed so far."""
        try:
            with open(os.path.join(self._tmp.name, "log"), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server (a crash, for tests)."""
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

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self._tmp.cleanup()
