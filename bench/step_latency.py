"""Step round-trip latency: farm vs the env in-process vs the dm_env_rpc reference stack.

For two observation sizes, a 4-float32 vector (``toy/latency`` with ``dist="none"``)
and a 720x1280x3 uint8 frame (``toy/pixels``), it times single synchronous
``step`` calls (action in, observation + reward out) through:

* ``in-process``: the env class called directly (``env.step``), the floor;
* ``farm unix`` / ``farm tcp``: a ``farm serve`` child process on a unix socket /
  on 127.0.0.1, stepped with ``farm.connect`` (the sync gymnasium client);
* ``dm_env_rpc tcp`` / ``dm_env_rpc unix``: ``bench/dm_env_rpc_reference.py`` (a
  dm_env_rpc EnvironmentServicer serving the same env classes) as a child
  process, stepped with the package's own client (``connection.Connection`` over
  an insecure channel + ``DmEnvAdaptor``), the baseline.

Each row: warm-up steps, then N timed steps (one ``perf_counter_ns`` pair around
each ``step``) in interleaved rounds (round r: stack A, B, C, ... each ``N /
rounds`` steps); episodes are long enough that no reset falls in the window.

Layouts. Alone (the default): in each round a stack is opened, warmed up, timed
and closed, so nothing of another stack is alive while it is timed. Together
(``--together``): every stack stays open for the whole run. The together layout
measures interference, not a stack: the measuring process then holds every
stack's gRPC client, and gRPC's poller lets one client's threads pick up another
channel's socket events and hand them over (farm unix: 230 us with nothing else
open, 288 us with dm_env_rpc's two clients open and idle in the same process;
dm_env_rpc is slowed the same way).

Prints a table and writes ``bench/results/step_latency.json``.

    .venv/bin/python bench/step_latency.py             # 3000 small / 300 image steps per row
    .venv/bin/python bench/step_latency.py --quick     # 500 / 60
    .venv/bin/python bench/step_latency.py --together  # all stacks open at once
"""

from __future__ import annotations

# farm first: it tunes gRPC's transport (GRPC_EXPERIMENTS), which gRPC reads when imported.
# Every stack in the run, dm_env_rpc's client and server included, uses the same setting.
import farm  # isort: skip

import argparse
import contextlib
import gc
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import psutil
from _common import (
    ForeignLoad,
    ReferenceServer,
    fmt_us,
    machine_info,
    print_foreign_load,
    summarize_ns,
    warn_if_busy,
    write_json,
)
from rich.console import Console
from rich.table import Table

from env_adapters.toy.latency import LatencyEnv
from env_adapters.toy.pixels import PixelsEnv
from farm.server.process import ServerProcess

EPISODE_LENGTH = 1_000_000_000  # no episode ends inside a benchmark
OBS_KINDS = {
    # kind: (label, farm env id, farm env kwargs, in-process factory, action count)
    "small": (
        "4 x float32",
        "toy/latency",
        {"dist": "none", "episode_length": EPISODE_LENGTH},
        lambda: LatencyEnv(dist="none", episode_length=EPISODE_LENGTH),
        2,
    ),
    "image": (
        "720x1280x3 uint8",
        "toy/pixels",
        {"episode_length": EPISODE_LENGTH},
        lambda: PixelsEnv(episode_length=EPISODE_LENGTH),
        4,
    ),
}
STACKS = ("in-process", "farm unix", "farm tcp", "dm_env_rpc tcp", "dm_env_rpc unix")
BASELINE = "dm_env_rpc tcp"
# p50 targets for the farm rows (from the issue), in us
TARGETS_US = {"small": 250.0, "image": 3000.0}
ROW_TIME_LIMIT_S = 40.0  # per stack: a row stops early (and says so) past this

StepFn = Callable[[int], Any]
# a stack yields its step function and the pid of its server process (None in-process)


# ---------------------------------------------------------------- stacks


@contextlib.contextmanager
def in_process(kind: str, _sock_dir: str) -> Iterator[tuple[StepFn, int | None]]:
    env = OBS_KINDS[kind][3]()
    env.reset(seed=0)
    try:
        yield env.step, None
    finally:
        env.close()


def _farm(transport: str) -> Callable[[str, str], Any]:
    @contextlib.contextmanager
    def stack(kind: str, sock_dir: str) -> Iterator[tuple[StepFn, int | None]]:
        _, env_id, kwargs, _, _ = OBS_KINDS[kind]
        address = (
            f"unix://{os.path.join(sock_dir, f'farm-{kind}.sock')}"
            if transport == "unix"
            else "127.0.0.1:0"
        )
        with ServerProcess(env_id, address=address, env_kwargs=json.dumps(kwargs)) as srv:
            env = farm.connect(srv.address)
            try:
                env.reset(seed=0)
                yield env.step, srv.pid
            finally:
                env.close()

    return stack


def _dm_env_rpc(transport: str) -> Callable[[str, str], Any]:
    @contextlib.contextmanager
    def stack(kind: str, sock_dir: str) -> Iterator[tuple[StepFn, int | None]]:
        from dm_env_rpc.v1 import connection, dm_env_adaptor, dm_env_rpc_pb2

        address = (
            f"unix://{os.path.join(sock_dir, f'dm-{kind}.sock')}"
            if transport == "unix"
            else "127.0.0.1:0"
        )
        with ReferenceServer(kind, address=address) as srv:
            # What connection.create_secure_channel_and_connect does, minus the
            # (local) credentials: farm's rows use insecure channels too.
            channel = grpc.insecure_channel(
                srv.address,
                options=[
                    ("grpc.max_send_message_length", -1),
                    ("grpc.max_receive_message_length", -1),
                ],
            )
            grpc.channel_ready_future(channel).result(timeout=10)
            conn = connection.Connection(channel)
            env, world = dm_env_adaptor.create_and_join_world(conn, {}, {})
            try:
                env.reset()

                def step(action: int) -> Any:
                    return env.step({"action": action})

                yield step, srv.proc.pid
            finally:
                env.close()
                conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=world))
                conn.close()
                channel.close()

    return stack


STACK_FACTORIES: dict[str, Callable[[str, str], Any]] = {
    "in-process": in_process,
    "farm unix": _farm("unix"),
    "farm tcp": _farm("tcp"),
    "dm_env_rpc tcp": _dm_env_rpc("tcp"),
    "dm_env_rpc unix": _dm_env_rpc("unix"),
}


# ---------------------------------------------------------------- measuring


def _check_obs(kind: str, stack: str, result: Any) -> None:
    """The last step really carried the observation it should (outside the timing)."""
    obs = result.observation["observation"] if stack.startswith("dm_env_rpc") else result[0]
    want_shape, want_dtype = ((4,), np.float32) if kind == "small" else ((720, 1280, 3), np.uint8)
    if obs.shape != want_shape or obs.dtype != want_dtype:
        raise AssertionError(f"{stack}: got obs {obs.dtype}{obs.shape}")


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


class _Row:
    """One open stack and what was measured on it so far."""

    def __init__(self, kind: str, stack: str, step: StepFn, server_pid: int | None) -> None:
        self.kind, self.stack, self.step, self.server_pid = kind, stack, step, server_pid
        self.samples: list[int] = []
        self.client_cpu_s = 0.0
        self.server_cpu_s = 0.0
        self.last: Any = None

    def round(self, warm: list[int], chunk: list[int], deadline: float) -> None:
        """One round: warm up (untimed), collect garbage, then time ``chunk``, with the
        server's CPU over the timed part."""
        self.run(warm, timed=False, deadline=0.0)
        gc.collect()
        server_cpu0 = _cpu_s(self.server_pid)
        self.run(chunk, timed=True, deadline=deadline)
        self.server_cpu_s += _cpu_s(self.server_pid) - server_cpu0

    def run(self, actions: list[int], timed: bool, deadline: float) -> None:
        step, clock = self.step, time.perf_counter_ns
        if not timed:
            for a in actions:
                self.last = step(a)
            return
        samples = self.samples
        client_cpu0 = time.process_time()
        for a in actions:
            t0 = clock()
            self.last = step(a)
            samples.append(clock() - t0)
            if time.monotonic() > deadline:
                break
        self.client_cpu_s += time.process_time() - client_cpu0


def _actions(kind: str, warmup: int, steps: int, rounds: int) -> tuple[list[int], list[list[int]]]:
    """The same actions for every stack: the warm-up ones, then the timed ones per round."""
    n_actions = OBS_KINDS[kind][4]
    actions = [int(a) for a in np.random.default_rng(0).integers(0, n_actions, warmup + steps)]
    per_round = -(-steps // rounds)
    timed = actions[warmup:]
    return actions[:warmup], [timed[r * per_round : (r + 1) * per_round] for r in range(rounds)]


def time_kind(
    kind: str,
    stacks: list[str],
    warmup: int,
    steps: int,
    rounds: int,
    sock_dir: str,
    console: Console,
    alone: bool = True,
) -> list[dict[str, Any]]:
    """Time every stack for ``kind`` in interleaved rounds (round r: stack A, B, C, ...
    each ``steps / rounds`` steps), which spreads background noise over all stacks.

    Alone (the default): a stack is opened, warmed up, timed and closed again in each
    round, so nothing of another stack (its server, its client's gRPC threads) is alive
    while it is timed. Together (``alone=False``): every stack is opened and warmed up
    once and stays open while the others are timed (see the module doc).
    """
    if alone:
        return _time_kind_alone(kind, stacks, warmup, steps, rounds, sock_dir, console)
    warm, chunks = _actions(kind, warmup, steps, rounds)
    errors: dict[str, str] = {}
    open_rows: list[_Row] = []
    with contextlib.ExitStack() as exit_stack:
        for stack in stacks:
            try:
                step, pid = exit_stack.enter_context(STACK_FACTORIES[stack](kind, sock_dir))
                row = _Row(kind, stack, step, pid)
                row.run(warm, timed=False, deadline=0.0)
            except Exception as e:  # noqa: BLE001 - one broken stack must not hide the rest
                errors[stack] = f"{type(e).__name__}: {e}"
                console.print(f"[red]{kind} / {stack} failed:[/] {errors[stack]}")
                continue
            open_rows.append(row)
        deadline = time.monotonic() + ROW_TIME_LIMIT_S * max(1, len(open_rows))
        for chunk in chunks:
            for row in open_rows:
                if row.stack in errors:
                    continue
                try:
                    # warmed up again, as in the alone layout: it sat idle while the
                    # others ran, and its first steps after a pause are slower
                    row.round(warm, chunk, deadline)
                except Exception as e:  # noqa: BLE001
                    errors[row.stack] = f"{type(e).__name__}: {e}"
                    console.print(f"[red]{kind} / {row.stack} failed:[/] {errors[row.stack]}")
        for row in open_rows:
            if row.stack not in errors:
                try:
                    _check_obs(kind, row.stack, row.last)
                except AssertionError as e:
                    errors[row.stack] = str(e)
    return _results(
        kind, stacks, warmup, steps, errors, {row.stack: row for row in open_rows}, console
    )


def _results(
    kind: str,
    stacks: list[str],
    warmup: int,
    steps: int,
    errors: dict[str, str],
    by_stack: dict[str, _Row],
    console: Console,
) -> list[dict[str, Any]]:
    results = []
    for stack in stacks:
        if stack in errors:
            results.append({"observation": kind, "stack": stack, "error": errors[stack]})
            continue
        row = by_stack[stack]
        n = len(row.samples)
        out: dict[str, Any] = {"observation": kind, "stack": stack, "warmup": warmup}
        out.update(summarize_ns(row.samples))
        # CPU time per step (all threads of each process): where the round trip goes
        out["client_cpu_us_per_step"] = row.client_cpu_s / n * 1e6
        out["server_cpu_us_per_step"] = row.server_cpu_s / n * 1e6 if row.server_pid else None
        out["truncated_by_time_limit"] = n < steps
        results.append(out)
        console.print(
            f"{kind:5s} {stack:16s} p50 {fmt_us(out['p50_us']):>9s}  "
            f"p99 {fmt_us(out['p99_us']):>9s}  ({n} steps)"
        )
    return results


def _time_kind_alone(
    kind: str,
    stacks: list[str],
    warmup: int,
    steps: int,
    rounds: int,
    sock_dir: str,
    console: Console,
) -> list[dict[str, Any]]:
    warm, chunks = _actions(kind, warmup, steps, rounds)
    errors: dict[str, str] = {}
    rows: dict[str, _Row] = {}
    deadline = time.monotonic() + ROW_TIME_LIMIT_S * max(1, len(stacks))
    for chunk in chunks:
        for stack in stacks:
            if stack in errors:
                continue
            try:
                with STACK_FACTORIES[stack](kind, sock_dir) as (step, pid):
                    row = rows.setdefault(stack, _Row(kind, stack, step, pid))
                    row.step, row.server_pid = step, pid
                    row.round(warm, chunk, deadline)
                    _check_obs(kind, stack, row.last)
            except Exception as e:  # noqa: BLE001 - one broken stack must not hide the rest
                errors[stack] = f"{type(e).__name__}: {e}"
                console.print(f"[red]{kind} / {stack} failed:[/] {errors[stack]}")
    return _results(kind, stacks, warmup, steps, errors, rows, console)


# ---------------------------------------------------------------- output


def add_ratios(rows: list[dict[str, Any]]) -> None:
    base = {r["observation"]: r for r in rows if r["stack"] == BASELINE and "p50_us" in r}
    for r in rows:
        b = base.get(r["observation"])
        if b is not None and "p50_us" in r:
            r["p50_ratio_vs_dm_env_rpc_tcp"] = r["p50_us"] / b["p50_us"]
            r["mean_ratio_vs_dm_env_rpc_tcp"] = r["mean_us"] / b["mean_us"]
        if r["stack"].startswith("farm") and "p50_us" in r:
            target = TARGETS_US[r["observation"]]
            r["target_p50_us"] = target
            r["meets_target"] = r["p50_us"] <= target


def render(rows: list[dict[str, Any]], info: dict[str, Any], console: Console) -> None:
    table = Table(
        title=f"step round-trip latency ({info['cpu_count']} CPUs, python {info['python']}, "
        f"grpcio {info['grpcio']}, protobuf {info['protobuf']}, {info['date']})"
    )
    cols = ("observation", "stack", "p50", "p99", "mean", "p50 vs dm tcp", "target (p50)")
    for col in (*cols, "CPU/step client+server"):
        table.add_column(col, justify="left" if col in ("observation", "stack") else "right")
    last_kind = None
    for r in rows:
        kind = r["observation"]
        if last_kind is not None and kind != last_kind:
            table.add_section()
        last_kind = kind
        label = OBS_KINDS[kind][0].replace(" x ", "x")
        if "error" in r:
            table.add_row(label, r["stack"], "error", "", "", "", r["error"][:40], "")
            continue
        ratio = r.get("p50_ratio_vs_dm_env_rpc_tcp")
        target = ""
        if "meets_target" in r:
            verdict = "[green]PASS[/]" if r["meets_target"] else "[red]FAIL[/]"
            target = f"<={fmt_us(r['target_p50_us'])} {verdict}"
        cpu = fmt_us(r["client_cpu_us_per_step"])
        if r["server_cpu_us_per_step"] is not None:
            cpu += f" + {fmt_us(r['server_cpu_us_per_step'])}"
        cpu = cpu.replace(" us", "us").replace(" ms", "ms")
        table.add_row(
            label,
            r["stack"],
            fmt_us(r["p50_us"]),
            fmt_us(r["p99_us"]),
            fmt_us(r["mean_us"]),
            f"{ratio:.2f}x" if ratio is not None else "",
            target,
            cpu,
        )
    console.print(table)
    print_foreign_load(console, info)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="step round-trip latency (see module doc)")
    p.add_argument("--quick", action="store_true", help="fewer steps (500 small / 60 image)")
    p.add_argument("--small-steps", type=int, help="timed steps per small-observation row")
    p.add_argument("--image-steps", type=int, help="timed steps per image row")
    p.add_argument(
        "--stacks", default=",".join(STACKS), help=f"comma-separated subset of {list(STACKS)}"
    )
    p.add_argument("--obs", default="small,image", help="comma-separated subset of small,image")
    p.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds the timed steps are split into"
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="keep every stack open for the whole run (default: each only while it is timed)",
    )
    p.add_argument("--alone", action="store_true", help="the default layout (kept for scripts)")
    p.add_argument("--json", default="step_latency.json", help="file name under bench/results/")
    args = p.parse_args(argv)

    if args.alone and args.together:
        p.error("--alone and --together are two layouts; pick one")
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    kinds = [k.strip() for k in args.obs.split(",") if k.strip()]
    for s in stacks:
        if s not in STACK_FACTORIES:
            p.error(f"unknown stack {s!r}")
    for k in kinds:
        if k not in OBS_KINDS:
            p.error(f"unknown observation kind {k!r}")
    steps = {
        "small": args.small_steps or (500 if args.quick else 3000),
        "image": args.image_steps or (60 if args.quick else 300),
    }
    warmups = {k: max(10, n // 10) for k, n in steps.items()}

    console = Console(width=max(Console().width, 130))
    info = machine_info()
    warn_if_busy(info, console)
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="farm-bench-") as sock_dir,
        ForeignLoad() as foreign,
    ):
        for kind in kinds:
            t0, f0 = time.monotonic(), foreign.cpu_s()
            kind_rows = time_kind(
                kind,
                stacks,
                warmups[kind],
                steps[kind],
                args.rounds,
                sock_dir,
                console,
                alone=not args.together,
            )
            share = foreign.fraction(foreign.cpu_s() - f0, time.monotonic() - t0)
            for r in kind_rows:
                r["foreign_cpu_fraction"] = share
            rows += kind_rows
        info["foreign_cpu_fraction"] = foreign.fraction(
            foreign.cpu_s(), time.monotonic() - foreign.t0
        )
    add_ratios(rows)
    info["loadavg_at_end"] = list(os.getloadavg())
    render(rows, info, console)
    out = write_json(
        args.json,
        {
            "benchmark": "step_latency",
            "machine": info,
            "config": {
                "timed_steps": steps,
                "warmup_steps": warmups,
                "rounds": args.rounds,
                "layout": "together" if args.together else "alone",
                "episode_length": EPISODE_LENGTH,
                "image_encoding": "raw",
                "farm_env": {k: [v[1], v[2]] for k, v in OBS_KINDS.items()},
                "baseline": BASELINE,
                "wall_s": time.monotonic() - t_start,
            },
            "targets_p50_us": TARGETS_US,
            "rows": rows,
        },
    )
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
