"""``farm demo``: serve toy envs in child processes and play them through the client.

This is the main job of the embedded default until the trainer lands: it shows
the whole path (``farm serve`` -> gRPC -> ``farm.connect`` / ``farm.EnvPool``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="serve toy envs and play episodes through the client")
    p.add_argument("--episodes", type=int, default=3, help="episodes per policy (default 3)")
    p.add_argument("--pool-seconds", type=float, default=3.0, help="how long the pool runs")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import farm
    from env_adapters.toy import solve_instruction
    from farm.server.process import ServerProcess

    console = Console()
    tmp = tempfile.mkdtemp(prefix="farm-demo-")
    rng = np.random.default_rng(args.seed)
    sock = f"unix://{os.path.join(tmp, 'text-task.sock')}"
    console.rule("[bold]1. one env: toy/text-task served by `farm serve`, played by `farm.connect`")
    with ServerProcess("toy/text-task", address=sock) as srv:
        console.print(f"server pid {srv.pid} at [cyan]{srv.address}[/]")
        env = farm.connect(srv.address)
        console.print(
            f"observation space: {env.observation_space}\naction space: {env.action_space}"
        )
        results = Table("policy", "episode", "instruction", "typed", "return", "steps")
        for policy in ("oracle", "random"):
            for ep in range(args.episodes):
                obs, info = env.reset(seed=args.seed + ep)
                plan = solve_instruction(obs["instruction"]) if policy == "oracle" else None
                total, steps, done = 0.0, 0, False
                while not done:
                    action = plan[steps] if plan else int(rng.integers(26))
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    steps += 1
                    done = terminated or truncated
                results.add_row(
                    policy, str(ep), obs["instruction"], obs["typed"], f"{total:.0f}", str(steps)
                )
        console.print(results)
        try:
            env.step(0)
        except farm.errors.FailedPreconditionError as e:
            console.print(
                f"a step after the episode ended is refused, the session lives on:\n  [yellow]{e}"
            )
        env.close()

    console.rule("[bold]2. a pool: 8 toy/latency envs (heavy-tailed steps) over 2 servers")
    kwargs = '{"dist": "lognormal", "median_s": 0.01, "sigma": 1.0}'
    with (
        ServerProcess("toy/latency", env_kwargs=kwargs) as a,
        ServerProcess("toy/latency", env_kwargs=kwargs) as b,
        farm.EnvPool([a.address, b.address], num_envs=8, batch_size=2) as pool,
    ):
        _, info = pool.reset(seed=args.seed)
        ids = info["env_id"]
        steps = 0
        start = time.perf_counter()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("stepping", total=args.pool_seconds)
            while (elapsed := time.perf_counter() - start) < args.pool_seconds:
                pool.send(rng.integers(0, 2, len(ids)), ids)
                _, _, _, _, info = pool.recv()
                ids = info["env_id"]
                steps += len(ids)
                progress.update(task, completed=elapsed)
        rate = steps / (time.perf_counter() - start)
    console.print(
        f"{steps} steps in {args.pool_seconds:g} s: [bold green]{rate:.0f} steps/s[/] "
        f"(a lockstep vector env would wait for the slowest of 8 envs every step)"
    )
    console.rule("[bold]done")
    return 0
