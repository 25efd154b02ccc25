"""farm: an asynchronous online environment farm for training GUI agents with RL.

The entry points most users need::

    import farm
    env = farm.connect("unix:///tmp/env.sock")   # a gymnasium.Env backed by a farm server
    aenv = await farm.aconnect("127.0.0.1:50051") # the same, for asyncio code
    pool = farm.EnvPool(["127.0.0.1:50051"], num_envs=16, batch_size=4)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# Transport tuning, applied before grpc initialises (it reads the variable once).
# gRPC's EventEngine hands each socket event to a worker thread and then to the
# asyncio poller thread; the older polling path does the I/O on the polling
# thread itself. On loopback that cuts a step's round trip by ~100 us (see
# docs/architecture.md, "Transport"). Set GRPC_EXPERIMENTS yourself to override;
# set FARM_GRPC_DEFAULTS=1 to leave gRPC's defaults alone.
GRPC_EXPERIMENTS = ",".join(
    f"-event_engine_{name}" for name in ("client", "listener", "for_all_other_endpoints")
)
if os.environ.get("FARM_GRPC_DEFAULTS") != "1":
    os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)

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
