"""Shared fixtures: real ``farm serve`` child processes and small helpers.

Everything talks over unix sockets in a private temp dir or over 127.0.0.1.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

import pytest

from farm.server.process import ServerProcess


@pytest.fixture(scope="session")
def sock_dir() -> Iterator[str]:
    """A short private directory for unix sockets (paths must stay < 108 bytes)."""
    path = tempfile.mkdtemp(prefix="farm-t-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


_socket_ids = itertools.count()


@pytest.fixture
def sock_path(sock_dir: str) -> Callable[[str], str]:
    """``sock_path("name")`` -> a fresh ``unix:///...`` address nobody else uses."""

    def make(name: str = "s") -> str:
        return f"unix://{os.path.join(sock_dir, f'{name}-{next(_socket_ids)}.sock')}"

    return make


@pytest.fixture(scope="session")
def text_server(sock_dir: str) -> Iterator[ServerProcess]:
    """``farm serve toy/text-task`` on a unix socket, shared by the whole session."""
    srv = ServerProcess("toy/text-task", address=f"unix://{sock_dir}/text-task.sock")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def text_server_tcp() -> Iterator[ServerProcess]:
    """``farm serve toy/text-task`` on 127.0.0.1 (a free port), shared by the session."""
    srv = ServerProcess("toy/text-task", address="127.0.0.1:0")
    srv.start()
    yield srv
    srv.stop()
