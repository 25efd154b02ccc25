"""Helpers shared by the benchmark scripts (run them directly; this is not a package).

Percentile summaries, machine info, JSON output under ``bench/results/``, and a
child-process runner for the dm_env_rpc reference server.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from farm.server.process import ReadyFileProcess

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"


def summarize_ns(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / mean (and friends) of latency samples given in ns, reported in us."""
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {
        "n": len(a),
        "p50_us": float(np.percentile(a, 50)),
        "p90_us": float(np.percentile(a, 90)),
        "p99_us": float(np.percentile(a, 99)),
        "mean_us": float(a.mean()),
        "std_us": float(a.std()),
        "min_us": float(a.min()),
        "max_us": float(a.max()),
    }


def fmt_us(us: float) -> str:
    """A latency for humans: us below 1 ms, ms above."""
    if us < 1000:
        return f"{us:.0f} us"
    return f"{us / 1000:.2f} ms"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def machine_info() -> dict[str, Any]:
    """Where and with what the numbers were taken."""
    from google.protobuf.internal import api_implementation

    status = _git("status", "--porcelain", "--", "farm", "env_adapters")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(),
        "loadavg_at_start": list(os.getloadavg()),
        # how busy the CPUs were (all processes) in the second before the benchmark
        "cpu_busy_percent_before": psutil.cpu_percent(interval=1.0),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        # the interpreter behind the venv (bootstrap prefers Debian's optimised build)
        "python_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        "grpcio": _version("grpcio"),
        "protobuf": _version("protobuf"),
        "protobuf_backend": api_implementation.Type(),
        "numpy": _version("numpy"),
        "gymnasium": _version("gymnasium"),
        "dm_env_rpc": _version("dm-env-rpc"),
        "farm": _version("farm"),
        "git_commit": _git("rev-parse", "HEAD"),
        "farm_source_sha256": source_digest(),
        "git_farm_dirty": bool(status) if status is not None else None,
    }


def source_digest() -> str:
    """A digest of farm/ and env_adapters/ sources (the tree may be uncommitted)."""
    h = hashlib.sha256()
    for sub in ("farm", "env_adapters"):
        for path in sorted((REPO_ROOT / sub).rglob("*.py")):
            h.update(str(path.relative_to(REPO_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def warn_if_busy(info: dict[str, Any], console: Any) -> None:
    """Say so when something else was using the CPUs as the benchmark started."""
    busy = info["cpu_busy_percent_before"]
    if busy > 10:
        console.print(
            f"[yellow]warning: the CPUs were {busy:.0f}% busy just before starting; other "
            "processes share them and the numbers will be noisier[/]"
        )


class ForeignLoad:
    """CPU used by processes outside this benchmark's process tree, sampled in a thread.

    Another workload on the machine (a test suite, a build) makes latency and
    throughput numbers worse; this records how much of it there was, so a result
    can be judged. ``cpu_s()`` is cumulative; take deltas around a measurement.
    Processes that exit between two samples lose their last interval (undercount).
    """

    def __init__(self, interval_s: float = 0.5) -> None:
        self._me = os.getpid()
        self._interval = interval_s
        self._last: dict[int, float] = {}
        self._total = 0.0
        self._first = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="foreign-load")
        self.t0 = time.monotonic()

    def __enter__(self) -> ForeignLoad:
        self._sample()
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self) -> None:
        procs: dict[int, tuple[int, float]] = {}
        for p in psutil.process_iter(["pid", "ppid", "cpu_times"]):
            ct = p.info["cpu_times"]
            if ct is not None:
                procs[p.info["pid"]] = (p.info["ppid"] or 0, ct.user + ct.system)

        def ours(pid: int) -> bool:
            for _ in range(64):
                if pid == self._me:
                    return True
                if pid not in procs or pid <= 1:
                    return False
                pid = procs[pid][0]
            return False

        delta = 0.0
        last: dict[int, float] = {}
        for pid, (_, cpu) in procs.items():
            if ours(pid):
                continue
            last[pid] = cpu
            if not self._first:
                delta += cpu - self._last.get(pid, 0.0)  # a new process: all of its CPU
        with self._lock:
            self._total += max(0.0, delta)
            self._last = last
            self._first = False

    def cpu_s(self) -> float:
        """Foreign CPU seconds since ``__enter__`` (as of the last sample)."""
        with self._lock:
            return self._total

    @staticmethod
    def fraction(cpu_s: float, wall_s: float) -> float:
        """``cpu_s`` as a fraction of all CPUs over ``wall_s``."""
        return cpu_s / (wall_s * (os.cpu_count() or 1)) if wall_s > 0 else 0.0


def print_foreign_load(console: Any, info: dict[str, Any]) -> None:
    """The line saying how much CPU other processes used during the run, if measured."""
    share = info.get("foreign_cpu_fraction")
    if share is not None:
        style = "yellow" if share > 0.05 else "dim"
        console.print(
            f"[{style}]other processes used {share:.0%} of the {info['cpu_count']} CPUs "
            "during this run[/]"
        )


def write_json(name: str, data: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>`` (the folder is git-ignored) and return its path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def child_env() -> dict[str, str]:
    """The environment for child servers: the repo importable, nothing else changed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


class ReferenceServer(ReadyFileProcess):
    """``bench/dm_env_rpc_reference.py`` as a child process (cf. farm's ServerProcess).

    >>> with ReferenceServer("small", address="127.0.0.1:0") as srv:
    ...     srv.address  # "127.0.0.1:PORT"
    """

    name = "dm_env_rpc reference server"

    def __init__(self, obs: str, *, address: str, startup_timeout_s: float = 30.0) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s, environ=child_env())
        self.obs = obs
        self._requested = address

    def command(self, ready_file: str) -> list[str]:
        return [
            sys.executable,
            str(BENCH_DIR / "dm_env_rpc_reference.py"),
            "--address",
            self._requested,
            "--obs",
            self.obs,
            "--ready-file",
            ready_file,
        ]
