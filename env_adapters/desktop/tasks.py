"""The desktop task suite: ``desktop/<task>`` env ids on xterm, mousepad and galculator.

Every task is a :class:`~env_adapters.gui.TaskSpec` (``kind="desktop"``;
``setup["apps"]`` names the apps it starts, ``evaluator["name"]`` its
checker) plus its logic, a :class:`~env_adapters.desktop.env.DesktopTask`:
``setup`` writes the episode's files into the fresh home directory, starts
the apps and returns the instruction (seeded: the same seed gives the same
episode); ``check`` inspects real state when the agent declares ``done()``:
files and their modes, the GSettings keyfile, window titles, the clipboard
(``xclip``), processes. Home paths in instructions are absolute (``$HOME`` is
private to each sandbox and differs between them).

Infeasible tasks ask for something the desktop does not offer (no network,
no plotting); the right answer is ``fail()``.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import numpy as np

from env_adapters.desktop.context import TaskContext
from env_adapters.desktop.env import DesktopEnv, DesktopTask
from env_adapters.gui.tasks import CheckedSuite, SuiteEntry, TaskSpec

WORDS = (
    "amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
    "juniper", "kestrel", "lagoon", "meadow", "nectar", "onyx", "pepper", "quartz", "raven",
    "saffron", "tundra", "umber", "velvet", "willow", "yarrow", "zephyr",
)  # fmt: skip
XTERM = ("xterm", "-fa", "Monospace", "-fs", "11", "-geometry", "100x30")
MOUSEPAD = ("mousepad",)
GALCULATOR = ("galculator",)


def pick(rng: np.random.Generator, items: tuple[str, ...] | list[str], n: int = 1) -> list[str]:
    return [str(x) for x in rng.choice(list(items), size=n, replace=False)]


def read(ctx: TaskContext, relative: str) -> str | None:
    p = ctx.path(relative)
    return p.read_text(errors="replace") if p.is_file() else None


def lines(text: str | None) -> list[str]:
    return [] if text is None else [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def result(ok: bool, **info: Any) -> tuple[float, dict[str, Any]]:
    return (1.0 if ok else 0.0), info


# ---------------------------------------------------------------- terminal


class Terminal(DesktopTask):
    """Base: one xterm, focused."""

    def start(self, ctx: TaskContext) -> None:
        ctx.launch(XTERM, wm_class="xterm")


class TerminalCreateFile(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.word = pick(rng, WORDS)[0]
        self.start(ctx)
        path = ctx.home / "notes" / "greeting.txt"
        return f'Create the file {path} containing the line "hello {self.word}".'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        got = lines(read(ctx, "notes/greeting.txt"))
        return result(got == [f"hello {self.word}"], lines=got)


class TerminalMakeDir(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.name = "-".join(pick(rng, WORDS, 2))
        self.start(ctx)
        return f"Create the directory {ctx.home}/projects/{self.name}/src (with its parents)."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        return result(ctx.path(f"projects/{self.name}/src").is_dir())


class TerminalRenameFile(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.n = int(rng.integers(10, 99))
        self.content = " ".join(pick(rng, WORDS, 5)) + "\n"
        ctx.write(f"draft-{self.n}.txt", self.content)
        self.start(ctx)
        return f"Rename the file {ctx.home}/draft-{self.n}.txt to {ctx.home}/final-{self.n}.txt."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        new, old = read(ctx, f"final-{self.n}.txt"), ctx.path(f"draft-{self.n}.txt").exists()
        return result(new == self.content and not old, renamed=new is not None, old_left=old)


class TerminalDeleteTmp(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        names = pick(rng, WORDS, 6)
        self.tmp, self.keep = names[:3], names[3:]
        for n in self.tmp:
            ctx.write(f"cache/{n}.tmp", "scratch\n")
        for n in self.keep:
            ctx.write(f"cache/{n}.log", "keep me\n")
        self.start(ctx)
        return f"Delete every .tmp file in {ctx.home}/cache and keep all other files there."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        cache = ctx.path("cache")
        left = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
        return result(left == sorted(f"{n}.log" for n in self.keep), left=left)


class TerminalCountLines(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.count = int(rng.integers(7, 60))
        rows = [
            f"{i},{pick(rng, WORDS)[0]},{int(rng.integers(0, 1000))}" for i in range(self.count)
        ]
        ctx.write("data.csv", "\n".join(rows) + "\n")
        self.start(ctx)
        return (
            f"Write the number of lines of {ctx.home}/data.csv (just the number) "
            f"into the file {ctx.home}/count.txt."
        )

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        got = (read(ctx, "count.txt") or "").strip()
        return result(got == str(self.count), got=got)


class TerminalChmod(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.name = pick(rng, WORDS)[0]
        ctx.write(f"bin/{self.name}.sh", "#!/bin/sh\necho ok\n", mode=0o644)
        self.start(ctx)
        return f"Make the script {ctx.home}/bin/{self.name}.sh executable by its owner."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        p = ctx.path(f"bin/{self.name}.sh")
        mode = p.stat().st_mode if p.is_file() else 0
        return result(bool(mode & stat.S_IXUSR), mode=oct(stat.S_IMODE(mode)))


class TerminalSetTitle(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.title = "-".join(pick(rng, WORDS, 2))
        self.start(ctx)
        return f'Set the title of the terminal window to "{self.title}".'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        titles = ctx.titles("xterm")
        return result(self.title in titles, titles=titles)


class TerminalKillProcess(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.seconds = str(int(rng.integers(100_000, 999_999)))
        self.sleeper = ctx.launch(("sleep", self.seconds), wm_class=None, watch=False)
        self.start(ctx)
        return f'Stop the process "sleep {self.seconds}" that runs on this desktop.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        alive = self.sleeper.app.exit_status() is None
        others = ctx.processes(lambda argv: argv == ["sleep", self.seconds])
        terminal = ctx.processes(lambda argv: bool(argv) and os.path.basename(argv[0]) == "xterm")
        return result(
            not alive and not others and bool(terminal),
            sleeper_alive=alive,
            terminal_alive=bool(terminal),
        )


# ---------------------------------------------------------------- editor


class EditorWriteNew(DesktopTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.name = pick(rng, WORDS)[0]
        self.text = "The " + " ".join(pick(rng, WORDS, 4)) + " report is ready."
        ctx.path("Documents").mkdir(exist_ok=True)
        ctx.launch(MOUSEPAD, wm_class="mousepad")
        return (
            f'In the text editor, write "{self.text}" and save it as '
            f"{ctx.home}/Documents/{self.name}.txt."
        )

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        got = lines(read(ctx, f"Documents/{self.name}.txt"))
        return result(got == [self.text], lines=got)


class EditorAppendLine(DesktopTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        words = pick(rng, WORDS, 5)
        self.before = [f"buy {w}" for w in words[:3]]
        self.item = f"call {words[3]} about {words[4]}"
        path = ctx.write("todo.txt", "\n".join(self.before) + "\n")
        ctx.launch((*MOUSEPAD, str(path)), wm_class="mousepad")
        return f'Add the line "{self.item}" at the end of {path} in the text editor and save it.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        got = lines(read(ctx, "todo.txt"))
        return result(got == [*self.before, self.item], lines=got)


class EditorCopyLine(DesktopTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.rows = [" ".join(pick(rng, WORDS, 3)) for _ in range(6)]
        self.n = int(rng.integers(2, 6))
        path = ctx.write("list.txt", "\n".join(self.rows) + "\n")
        ctx.launch((*MOUSEPAD, str(path)), wm_class="mousepad")
        return f"Copy line {self.n} of {path} (open in the text editor) to the clipboard."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        clip = ctx.clipboard()
        got = None if clip is None else clip.strip()
        return result(got == self.rows[self.n - 1], clipboard=got)


class EditorLineNumbers(DesktopTask):
    """A setting: mousepad's GSettings go to the keyfile backend, checked in the file."""

    KEY = "show-line-numbers"

    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        ctx.launch(MOUSEPAD, wm_class="mousepad")
        return "Turn on line numbers in the text editor (a setting of its View menu)."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        keyfile = read(ctx, ".config/glib-2.0/settings/keyfile") or ""
        on = re.search(rf"^{self.KEY}=true$", keyfile, re.MULTILINE) is not None
        return result(on, keyfile=keyfile[-300:])


# ---------------------------------------------------------------- calculator


class Calculate(DesktopTask):
    """galculator: compute an expression, copy the result to the clipboard."""

    def expression(self, rng: np.random.Generator) -> tuple[str, float]:
        a, b = (int(x) for x in rng.integers(10, 999, size=2))
        return f"{a} + {b}", float(a + b)

    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.expr, self.value = self.expression(rng)
        self.app = ctx.launch(GALCULATOR, wm_class="galculator")
        return f"Compute {self.expr} with the calculator and copy the result to the clipboard."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        clip = ctx.clipboard()
        try:
            got = float((clip or "").strip().replace(",", ""))
        except ValueError:
            return result(False, clipboard=clip)
        return result(abs(got - self.value) < 1e-9, clipboard=clip)


class CalculateExpression(Calculate):
    def expression(self, rng: np.random.Generator) -> tuple[str, float]:
        a, b, c = (int(x) for x in rng.integers(2, 99, size=3))
        return f"({a} - {b}) * {c}", float((a - b) * c)


class CalculateDivision(Calculate):
    def expression(self, rng: np.random.Generator) -> tuple[str, float]:
        b = int(rng.integers(2, 40))
        q = int(rng.integers(2, 400))
        return f"{b * q} / {b}", float(q)


# ---------------------------------------------------------------- windows


class WindowClose(DesktopTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.titles = pick(rng, WORDS, 3)
        self.target = self.titles[int(rng.integers(0, 3))]
        for t in self.titles:
            ctx.launch((*XTERM, "-T", t), wm_class="xterm", watch=False)
        return f'Close the terminal window titled "{self.target}" and leave the others open.'

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        titles = sorted(ctx.titles("xterm"))
        expected = sorted(t for t in self.titles if t != self.target)
        return result(titles == expected, titles=titles)


# ---------------------------------------------------------------- infeasible


class InstallPackage(Terminal):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.package = pick(rng, ("cowsay", "sl", "fortune-mod", "figlet"))[0]
        self.start(ctx)
        return f"Download and install the package {self.package} from the internet."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        return 0.0, {}


class CalculatorPlot(Calculate):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        self.power = int(rng.integers(2, 5))
        ctx.launch(GALCULATOR, wm_class="galculator")
        return f"Plot the graph of y = x^{self.power} for x from -5 to 5 in the calculator."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        return 0.0, {}


# ---------------------------------------------------------------- the suite


Entry = SuiteEntry[DesktopTask]


#: galculator ignores a key pressed again within ~100 ms (its button stays down that long)
SLOW_KEYS = {"type_delay_ms": 150}

SUITE: dict[str, Entry] = {
    "terminal-create-file": Entry(
        TerminalCreateFile, ("xterm",), "file-content", "create a file with given content"
    ),
    "terminal-make-dir": Entry(TerminalMakeDir, ("xterm",), "directory", "create nested dirs"),
    "terminal-rename-file": Entry(
        TerminalRenameFile, ("xterm",), "file-moved", "rename a file, content kept"
    ),
    "terminal-delete-tmp": Entry(
        TerminalDeleteTmp, ("xterm",), "dir-listing", "delete the .tmp files of a dir"
    ),
    "terminal-count-lines": Entry(
        TerminalCountLines, ("xterm",), "file-content", "count a file's lines into a file"
    ),
    "terminal-chmod": Entry(TerminalChmod, ("xterm",), "file-mode", "make a script executable"),
    "terminal-set-title": Entry(
        TerminalSetTitle, ("xterm",), "window-title", "set the terminal window's title"
    ),
    "terminal-kill-process": Entry(
        TerminalKillProcess, ("xterm",), "process-state", "stop a running process"
    ),
    "editor-write-new": Entry(
        EditorWriteNew, ("mousepad",), "file-content", "write a text, save it under a name"
    ),
    "editor-append-line": Entry(
        EditorAppendLine, ("mousepad",), "file-content", "append a line to a file and save"
    ),
    "editor-copy-line": Entry(
        EditorCopyLine, ("mousepad",), "clipboard", "copy a given line to the clipboard"
    ),
    "editor-line-numbers": Entry(
        EditorLineNumbers, ("mousepad",), "settings", "turn on a setting (line numbers)"
    ),
    "calc-add": Entry(
        Calculate, ("galculator",), "clipboard", "add two numbers, copy the result", setup=SLOW_KEYS
    ),
    "calc-expression": Entry(
        CalculateExpression, ("galculator",), "clipboard", "(a - b) * c, copy the result",
        setup=SLOW_KEYS,
    ),
    "calc-divide": Entry(
        CalculateDivision, ("galculator",), "clipboard", "divide, copy the result",
        setup=SLOW_KEYS,
    ),
    "window-close": Entry(
        WindowClose, ("xterm",), "window-titles", "close one of three windows by title"
    ),
    "terminal-install-infeasible": Entry(
        InstallPackage, ("xterm",), "none", "infeasible: install from the (absent) internet",
        feasible=False,
    ),
    "calc-plot-infeasible": Entry(
        CalculatorPlot, ("galculator",), "none", "infeasible: plot a graph (no plotting)",
        feasible=False, setup=SLOW_KEYS,
    ),
}  # fmt: skip

TASKS = CheckedSuite("desktop", SUITE, max_steps=25)
SPECS: dict[str, TaskSpec] = TASKS.specs
FEASIBLE: tuple[str, ...] = TASKS.feasible
INFEASIBLE: tuple[str, ...] = TASKS.infeasible
task_logic = TASKS.logic


def make_env(task: str, **kwargs: Any) -> DesktopEnv:
    """``desktop/<task>`` (or ``<task>``) as a :class:`DesktopEnv`."""
    return DesktopEnv(TASKS.spec(task), **kwargs)


TASKS.register(make_env)
