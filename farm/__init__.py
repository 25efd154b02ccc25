"""farm: an asynchronous online environment farm for training GUI agents with RL.

The entry points most users need::

    import farm
    env = farm.connect("unix:///tmp/env.sock")   # a gymnasium.Env backed by a farm server
    aenv = await farm.aconnect("127.0.0.1:50051") # the same, for asyncio code
    pool = farm.EnvPool(["127.0.0.1:50051"], num_envs=16, batch_size=4)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from farm.client import AsyncRemoteEnv, RemoteEnv, aconnect, connect
    from farm.pool import AsyncEnvPool, EnvPool

_LAZY = {
    "connect": "farm.client",
    "aconnect": "farm.client",
    "RemoteEnv": "farm.client",
    "AsyncRemoteEnv": "farm.client",
    "EnvPool": "farm.pool",
    "AsyncEnvPool": "farm.pool",
}

__all__ = [
    "AsyncEnvPool",
    "AsyncRemoteEnv",
    "EnvPool",
    "RemoteEnv",
    "__version__",
    "aconnect",
    "connect",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'farm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
