"""Live progress of a job (rich): episodes/s, success, staleness histogram, learner
utilisation, the curriculum's view. On a terminal it is a live table; otherwise a
line every 15 s."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from trainer.infra.job import Job


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


class Progress:
    def __init__(self, job: Job, *, enabled: bool = True, console: Console | None = None) -> None:
        self.job = job
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self._last_line = 0.0

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}")

    @contextlib.contextmanager
    def starting(self, what: str) -> Iterator[None]:
        if not self.enabled or not self.console.is_terminal:
            self.note(what + " ...")
            yield
            return
        with self.console.status(what + " ..."):
            yield

    def table(self) -> Table:
        j = self.job
        c = j.counters
        t = Table(title=f"farm job {j.spec.name}", show_header=False, expand=False)
        t.add_column(style="bold")
        t.add_column()
        budget = j.spec.budget
        limit = f" / {budget.minutes:g} min" if budget.minutes else ""
        t.add_row("elapsed", f"{j.elapsed / 60:.1f} min{limit}")
        t.add_row("policy version", f"{j.learner_policy.version} ({c.samples} samples)")
        t.add_row("episodes", f"{c.episodes} ({j.episodes_per_s():.2f}/s)")
        t.add_row("train success (last 200)", _pct(j.train_success()))
        if j.evals:
            e = j.evals[-1]
            per = "  ".join(f"{k}:{_pct(v)}" for k, v in e["per_task"].items())
            t.add_row("greedy eval", f"{_pct(e['success'])} at v{e['version']}  [dim]{per}[/dim]")
        hist = " ".join(f"{k}:{v}" for k, v in sorted(c.staleness.items())) or "-"
        t.add_row("staleness (groups)", f"{hist}  (eta={j.spec.algorithm.eta})")
        t.add_row("learner utilisation", _pct(j.learner_utilisation()))
        ctl = j.controller
        t.add_row(
            "groups",
            f"running {ctl.running}, ready {ctl.ready}, "
            f"zero-variance dropped {c.zero_variance_dropped}, "
            f"infra-discarded episodes {c.infra_discarded}",
        )
        if j.pool is not None:
            t.add_row(
                "sandboxes", f"{j.pool.size} ({j.pool.free} idle, {j.pool.replaced} replaced)"
            )
        mix = j.curriculum.snapshot()["mix"]
        t.add_row("curriculum mix", " ".join(f"{k}:{_pct(v)}" for k, v in mix.items()) or "-")
        return t

    def line(self) -> str:
        j = self.job
        e = j.evals[-1]["success"] if j.evals else None
        return (
            f"[{j.elapsed / 60:5.1f} min] v{j.learner_policy.version} "
            f"episodes {j.counters.episodes} ({j.episodes_per_s():.2f}/s) "
            f"train {_pct(j.train_success())} eval {_pct(e)} "
            f"learner {_pct(j.learner_utilisation())} "
            f"staleness {dict(sorted(j.counters.staleness.items()))}"
        )

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        if not self.console.is_terminal:
            task = _Ticker(self)
            task.start()
            try:
                yield
            finally:
                task.stop()
            return
        with Live(_Renderable(self), console=self.console, refresh_per_second=2, transient=False):
            yield


class _Renderable:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __rich__(self) -> Any:
        return self.progress.table()


class _Ticker:
    def __init__(self, progress: Progress, every_s: float = 15.0) -> None:
        self.progress, self.every_s = progress, every_s
        self._task: Any = None

    def start(self) -> None:
        import asyncio

        async def tick() -> None:
            while True:
                await asyncio.sleep(self.every_s)
                self.progress.console.print(self.progress.line())

        self._task = asyncio.get_running_loop().create_task(tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
