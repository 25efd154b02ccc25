"""Sandbox backends behind one interface (:class:`~orchestration.backends.base.Backend`).

``local``, ``docker`` and ``ray``; an unknown name fails with
:class:`BackendNotAvailableError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.backends.base import Backend, Orphan, SandboxHandle, SandboxRequest, Usage
from orchestration.errors import BackendNotAvailableError

if TYPE_CHECKING:
    from orchestration.spec import FarmSpec

__all__ = [
    "Backend",
    "Orphan",
    "SandboxHandle",
    "SandboxRequest",
    "Usage",
    "make_backend",
]


def make_backend(name: str, state_dir: Path, spec: FarmSpec | None = None) -> Backend:
    """The backend called ``name`` for ``state_dir`` (``spec``: its farm-wide options)."""
    if name == "local":
        from orchestration.backends.local import LocalBackend

        return LocalBackend(state_dir)
    if name == "docker":
        from orchestration.backends.docker import DockerBackend, docker_client

        return DockerBackend(state_dir, docker_client())  # no SDK or no daemon: a clear error
    if name == "ray":
        from orchestration.backends.ray import RayBackend

        return RayBackend(state_dir, spec)  # no ray installed: MissingExtraError
    raise BackendNotAvailableError(f"unknown backend {name!r}")
