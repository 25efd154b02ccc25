"""Protocol versions and their negotiation.

A client opens a session with the versions it speaks; the server answers with
the highest version both speak, or ends the stream with FAILED_PRECONDITION
naming both lists. Minor versions add optional fields only; a new major
version is a new, incompatible protocol.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Versions this build speaks, newest first.
SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0",)
PROTOCOL_VERSION = SUPPORTED_VERSIONS[0]


def _key(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def negotiate(client_versions: Iterable[str]) -> str | None:
    """The highest version in both ``client_versions`` and ours, or None."""
    common = []
    for v in client_versions:
        if v in SUPPORTED_VERSIONS:
            try:
                common.append((_key(v), v))
            except ValueError:
                continue
    return max(common)[1] if common else None
