"""Sandbox backends behind one interface (:class:`~orchestration.backends.base.Backend`).

Only ``local`` is built; ``docker`` and ``ray`` are a later phase of the
orchestration issue and fail with :class:`BackendNotAvailableError`.
"""

from __future__ import annotations

from pathlib import Path

from orchestration.backends.base import Backend, Orphan, SandboxHandle, SandboxRequest, Usage
from orchestration.errors import BackendNotAvailableError

__all__ = [
    "Backend",
    "Orphan",
    "SandboxHandle",
    "SandboxRequest",
    "Usage",
    "make_backend",
]


def make_backend(name: str, state_dir: Path) -> Backend:
    """The backend called ``name`` for ``state_dir``."""
    if name == "local":
        from orchestration.backends.local import LocalBackend

        return LocalBackend(state_dir)
    if name in ("docker", "ray"):
        raise BackendNotAvailableError(
            f"the {name} backend is not built yet (a later phase of the orchestration "
            "work); use `backend: local`"
        )
    raise BackendNotAvailableError(f"unknown backend {name!r}")
