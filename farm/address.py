"""Endpoint addresses: ``unix:///abs/path``, ``unix:rel/path``, ``HOST:PORT``, ``[::1]:PORT``."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

from farm.errors import ConfigError

_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


@dataclass(frozen=True)
class Address:
    """A parsed endpoint address."""

    unix_path: str | None = None
    host: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Address:
        text = text.strip()
        if text.startswith("unix://"):
            path = text[len("unix://") :]
            if not path.startswith("/"):
                raise ConfigError(f"{text!r}: unix:// addresses need an absolute path (unix:///x)")
            return cls(unix_path=path)
        if text.startswith("unix:"):
            return cls(unix_path=os.path.abspath(text[len("unix:") :]))
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(
                f"invalid address {text!r}: expected unix:///path, HOST:PORT or [::1]:PORT"
            )
        host = host.strip("[]") or "127.0.0.1"
        if not 0 <= int(port) <= 65535:
            raise ConfigError(f"invalid port in address {text!r}")
        return cls(host=host, port=int(port))

    @property
    def is_unix(self) -> bool:
        return self.unix_path is not None

    @property
    def is_loopback(self) -> bool:
        if self.is_unix:
            return True
        assert self.host is not None
        if self.host in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def with_port(self, port: int) -> Address:
        return Address(host=self.host, port=port)

    def grpc_target(self) -> str:
        """The target string for ``grpc.*_channel`` / ``add_insecure_port``."""
        if self.is_unix:
            return f"unix://{self.unix_path}"
        assert self.host is not None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.grpc_target()


def unix_socket_in_use(path: str) -> bool:
    """True when something accepts connections on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
        return True
