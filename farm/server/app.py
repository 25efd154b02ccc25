"""Running a farm server: configuration, binding, lifecycle, signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from farm.address import Address, unix_socket_in_use
from farm.env import Executor
from farm.errors import ConfigError
from farm.registry import resolve
from farm.server.service import EnvironmentService

log = logging.getLogger("farm.server")

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


@dataclass
class ServerConfig:
    """How a server listens and how much it accepts.

    Attributes:
        address: ``unix:///path``, ``HOST:PORT`` (port 0 picks a free one).
        max_sessions: concurrent sessions; one more is refused with RESOURCE_EXHAUSTED.
        idle_timeout_s: a session with no request for this long is reaped.
        executor: how sync envs run unless they say otherwise (see :mod:`farm.env`).
        token: if set, every call must carry ``authorization: Bearer <token>``.
        max_message_bytes: larger requests are refused with RESOURCE_EXHAUSTED.
        allow_remote: permit binding to a non-loopback address.
        shutdown_grace_s: on stop, how long running requests may finish.
        record_dir: if set, record every episode into this episode store
            (:mod:`farm.recording`); ``record_job`` tags them with a job name.
    """

    address: str = "127.0.0.1:0"
    max_sessions: int = 64
    idle_timeout_s: float = 300.0
    executor: Executor = "thread"
    token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    allow_remote: bool = False
    shutdown_grace_s: float = 5.0
    record_dir: str | None = None
    record_job: str | None = None

    def validate(self) -> Address:
        addr = Address.parse(self.address)
        if not addr.is_loopback and not self.allow_remote:
            raise ConfigError(
                f"refusing to listen on {self.address!r}: farm binds only to loopback or "
                "unix sockets unless told otherwise (--allow-remote)"
            )
        if self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.idle_timeout_s <= 0:
            raise ConfigError(f"idle_timeout_s must be > 0, got {self.idle_timeout_s}")
        if self.executor not in ("thread", "inline"):
            raise ConfigError(f"executor must be 'thread' or 'inline', got {self.executor!r}")
        return addr


def grpc_server_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),  # two servers must never share a port silently
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
    ]


class Server:
    """A farm server for one environment (a spec string or a factory).

    ``await start()`` binds and returns the bound address; ``await stop()``
    drains (DRAINING in health, new sessions refused, idle sessions ended with
    UNAVAILABLE), lets requests in flight finish for up to the grace period,
    then closes every env and removes the unix socket file.
    """

    def __init__(
        self,
        env: str | Callable[[], Any],
        config: ServerConfig | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
        env_id: str | None = None,
    ) -> None:
        self.config = config or ServerConfig()
        self._addr = self.config.validate()
        if isinstance(env, str):
            factory = resolve(env, **(env_kwargs or {}))
            env_id = env_id or env
        else:
            factory = env
            env_id = env_id or getattr(env, "__name__", "custom")
        if self.config.record_dir:
            factory = _recording(factory, env_id, env_kwargs or {}, self.config)
        self.service = EnvironmentService(
            factory,
            env_id,
            max_sessions=self.config.max_sessions,
            idle_timeout_s=self.config.idle_timeout_s,
            executor=self.config.executor,
            token=self.config.token,
        )
        self._server: grpc.aio.Server | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.address: str | None = None
        self._stopped: asyncio.Event | None = None  # created on the server's loop in start()

    async def start(self) -> str:
        addr = self._addr
        if addr.is_unix:
            assert addr.unix_path is not None
            if os.path.exists(addr.unix_path):
                if unix_socket_in_use(addr.unix_path):
                    raise ConfigError(f"address in use: {addr} (another server is listening)")
                os.unlink(addr.unix_path)  # stale socket of a dead server
            os.makedirs(os.path.dirname(addr.unix_path) or ".", exist_ok=True)
        server = grpc.aio.server(options=grpc_server_options(self.config.max_message_bytes))
        server.add_generic_rpc_handlers([self.service.handler()])
        try:
            port = server.add_insecure_port(addr.grpc_target())
        except RuntimeError as e:
            raise ConfigError(f"cannot listen on {addr}: {e}") from e
        if not addr.is_unix:
            if port == 0:
                raise ConfigError(f"cannot listen on {addr}: address in use or unavailable")
            addr = addr.with_port(port)
        await server.start()
        self._server = server
        self._stopped = asyncio.Event()
        self._reaper = asyncio.get_running_loop().create_task(self.service.reap_forever())
        self.address = str(addr)
        log.info("serving %s at %s", self.service.env_id, self.address)
        return self.address

    async def wait(self) -> None:
        assert self._stopped is not None, "start() first"
        await self._stopped.wait()

    async def stop(self, grace: float | None = None) -> None:
        if self._server is None:
            return
        self.service.drain()
        grace = self.config.shutdown_grace_s if grace is None else grace
        await self._server.stop(grace)
        if self._reaper is not None:
            self._reaper.cancel()
        await self.service.close_all()
        if self._addr.is_unix and self._addr.unix_path and os.path.exists(self._addr.unix_path):
            with contextlib.suppress(OSError):
                os.unlink(self._addr.unix_path)
        self._server = None
        assert self._stopped is not None
        self._stopped.set()


def _recording(
    factory: Callable[[], Any], env_id: str, env_kwargs: dict[str, Any], config: ServerConfig
) -> Callable[[], Any]:
    """``factory`` whose envs record their episodes into ``config.record_dir``."""
    from farm.recording.recorder import RecordingConfig, recording_factory, store_root

    assert config.record_dir is not None
    try:
        root = store_root(config.record_dir)
    except OSError as e:
        raise ConfigError(f"cannot record into {config.record_dir!r}: {e}") from e
    rec = RecordingConfig(
        root=root, env_id=env_id, env_kwargs=dict(env_kwargs), job=config.record_job
    )
    return recording_factory(factory, rec)


async def serve_until_signal(server: Server, on_ready: Callable[[str], None] | None = None) -> None:
    """Start ``server``, call ``on_ready(address)``, stop gracefully on SIGTERM/SIGINT."""
    address = await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if on_ready is not None:
        on_ready(address)
    await stop.wait()
    log.info("shutting down")
    await server.stop()


class BackgroundServer:
    """A server on its own event loop in a daemon thread (tests, demos, benchmarks).

    >>> with BackgroundServer("toy/text-task") as srv:
    ...     env = farm.connect(srv.address)
    """

    def __init__(self, env: str | Callable[[], Any], config: ServerConfig | None = None, **kw: Any):
        self._server = Server(env, config, **kw)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="farm-server"
        )
        self.address = ""

    @property
    def service(self) -> EnvironmentService:
        return self._server.service

    def run(self, coro: Any, timeout: float | None = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> str:
        self._thread.start()
        self.address = self.run(self._server.start())
        return self.address

    def stop(self) -> None:
        if self._thread.is_alive():
            self.run(self._server.stop(grace=0.5))
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
