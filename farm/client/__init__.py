"""Clients: remote envs (sync and asyncio), low-level sessions, describe and health."""

from farm.client.env import AsyncRemoteEnv, RemoteEnv, aconnect, connect
from farm.client.session import AsyncSession, describe, health

__all__ = [
    "AsyncRemoteEnv",
    "AsyncSession",
    "RemoteEnv",
    "aconnect",
    "connect",
    "describe",
    "health",
]
