"""Browser sandbox latency on MiniWoB++: farm's BrowserEnv vs the miniwob package (Selenium).

Five MiniWoB++ tasks (``click-button``, ``click-link``, ``click-checkboxes``,
``enter-text``, ``login-user``) are played by one scripted policy, with the same
seeds, on these stacks (``--stacks`` picks; the default is all but the last two
farm rows):

* ``farm in-process``: ``farm.registry.make("miniwob/<task>")`` in this process,
  driven through its sync facade (``env.reset`` / ``env.step``), with its
  defaults: Debian's headless Chromium (``chromium-headless-shell``), a fresh
  browser context per episode, frames on demand (these five tasks are still:
  ``miniwob.ANIMATED_TASKS``);
* ``farm gRPC``: ``farm serve miniwob/<task>`` as a child process
  (``farm.server.process.ServerProcess``) on a unix socket, driven with
  ``farm.connect`` (the sync gymnasium client, raw images): the served path;
* ``farm gRPC (reuse page)``: the same with ``reuse_page=True``: an episode
  restarts on the page already loaded, as the package's own reset does;
* ``farm in-process (60 Hz)``: the first row with ``unthrottled_frames=False``
  (frames at 60 Hz, the setting for animated tasks), for comparison;
* ``miniwob Selenium``: the package's own env,
  ``gymnasium.make("miniwob/<task>-v1")``, headless Chromium via ChromeDriver
  (Debian's ``/usr/bin/chromium``), the baseline;
* ``miniwob Selenium reload``: the same with ``refresh_freq=1`` (the page is
  loaded again on every reset, as a fresh context does; the default reuses the
  page), for reference;
* ``farm in-process (reuse page)``, ``farm in-process (no spare)``
  (``spare_contexts=False``), ``farm in-process (full Chromium)`` (the full
  browser, ``/usr/bin/chromium``): more farm settings, on request;
* ``miniwob Selenium (headless shell)``: the package driving the headless shell
  farm uses, on request (a reference: is the binary what makes the difference?).

Equivalent actions: every stack clicks or types into an element named by the
ref in its *own* element list (farm: the text view, ``click_element(ref)`` /
``type_element(ref, text)``; the package: ``dom_elements``, ``CLICK_ELEMENT`` /
``FOCUS_ELEMENT_AND_TYPE_TEXT``), with the target found by its text. Both
observe a screenshot every step: farm returns the 160x210 screenshot, the text
view and the instruction; the package returns the utterance, the DOM elements
and the 160x210 screenshot (``record_screenshots`` is on, its default). On the
step that ends an episode the package returns an *empty* observation (no DOM
read, no screenshot) while farm observes as usual, so the headline step time is
over steps that do not end the episode; steps that end one are reported apart.

Each episode: a timed ``reset(seed=s)``, then the scripted steps, each timed
(one ``perf_counter_ns`` pair around the call). Two scenarios (``--think-ms``):
``think 0 ms`` calls back to back (the env never idles), ``think 300 ms``
waits 300 ms before every call (untimed), as a policy choosing its action
does; farm prepares the next episode's browser context in such thinking time
when it is long enough (``env_adapters/browser/idle.py``), the package has
nothing to prepare. Per task all stacks are
open at once, warmed up with one untimed episode, then run in interleaved
rounds (one episode per stack per round, rotating the order). A separate part
times one screenshot (capture + decode into an ``HxWx3`` uint8 array) at
160x210 and 1280x720: farm's ``ChromiumSandbox.screenshot`` (CDP
``Page.captureScreenshot``, PNG, Pillow) with frames on demand and at 60 Hz,
and, for reference, Selenium's
``get_screenshot_as_png`` + Pillow decode.

Prints tables and writes ``bench/results/browser.json``. Only file:// pages and
unix sockets are used.

    .venv/bin/python bench/browser.py            # 12 episodes per task and stack
    .venv/bin/python bench/browser.py --quick    # 4 episodes
"""

from __future__ import annotations

# farm first, as in the other benchmarks (it tunes gRPC's transport before grpc loads).
import farm  # isort: skip

import argparse
import asyncio
import contextlib
import gc
import io
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np
from _common import (
    ForeignLoad,
    fmt_us,
    machine_info,
    print_foreign_load,
    summarize_ns,
    warn_if_busy,
    write_json,
)
from rich.console import Console
from rich.table import Table

from env_adapters.browser.chromium import CHROMIUM, HEADLESS_SHELL
from farm.registry import make
from farm.server.process import ServerProcess

CHROMEDRIVER = "/usr/bin/chromedriver"
TASKS = ("click-button", "click-link", "click-checkboxes", "enter-text", "login-user")
STACKS = (  # the default set; STACK_FACTORIES has more
    "farm in-process",
    "farm gRPC",
    "farm gRPC (reuse page)",
    "farm in-process (60 Hz)",
    "miniwob Selenium",
    "miniwob Selenium reload",
)
BASELINE = "miniwob Selenium"
# the package with refresh_freq=1: a page load on every reset, as farm does (reference row)
RELOAD_STACK = "miniwob Selenium reload"
# the package driving the headless shell farm's sandboxes use (reference row)
SHELL_STACK = "miniwob Selenium (headless shell)"
TARGET_SPEEDUP = 2.0  # baseline p50 / farm p50, for reset and for steps
TASK_TIME_LIMIT_S = 45.0  # per task (all stacks): later rounds are skipped, and it says so
SCREENSHOT_TIME_LIMIT_S = 20.0  # per size (both implementations)
WARMUP_SEED = 10_000
TASK_SHAPE = (210, 160, 3)  # MiniWoB's task area, the observed screenshot in both envs
# screenshot sizes: (label, width, height, window width, window height)
SHOT_SIZES = {
    "160x210": ("160x210 (500x320 window)", 160, 210, 500, 320),
    "1280x720": ("1280x720", 1280, 720, 1280, 720),
}


# ---------------------------------------------------------------- scripted policy


@dataclass(frozen=True)
class Elem:
    """An element of a stack's own element list: its ref there, a kind, its text."""

    ref: int
    kind: str  # button | checkbox | textbox | span | div | other tag/role
    text: str


# one text-view line: [ref] role "name" ...
_LINE = re.compile(r'^\[(\d+)\] (\S+) ("(?:[^"\\]|\\.)*")')


def farm_elements(text_view: str) -> list[Elem]:
    """Elements of farm's text view (env_adapters/browser/dom.py)."""
    out = []
    for line in text_view.splitlines():
        m = _LINE.match(line)
        if m:
            out.append(Elem(int(m[1]), m[2], json.loads(m[3])))
    return out


_PKG_KINDS = {"input_checkbox": "checkbox", "input_text": "textbox", "input_password": "textbox"}


def package_elements(obs: dict[str, Any]) -> list[Elem]:
    """Elements of the package's ``dom_elements`` (text pseudo-elements left out)."""
    elements = obs["dom_elements"]
    texts: dict[int, list[str]] = {}  # parent ref -> its text pseudo-elements
    for e in elements:
        if e["tag"] == "t":
            texts.setdefault(int(e["parent"]), []).append(e["text"])
    out = []
    for e in elements:
        tag, ref = e["tag"], int(e["ref"])
        if tag == "t" or ref <= 0:
            continue
        kind = _PKG_KINDS.get(tag, tag)
        text = e["text"]
        if kind == "checkbox":  # <label><input type=checkbox>TEXT</label>
            text = " ".join(texts.get(int(e["parent"]), []))
        out.append(Elem(ref, kind, " ".join(text.split())))
    return out


Action = tuple[str, int, str]  # ("click" | "type", ref, text)


def _find(elems: list[Elem], kinds: tuple[str, ...], text: str | None = None) -> Elem:
    for e in elems:
        if e.kind in kinds and (text is None or e.text == text):
            return e
    raise LookupError(f"no {'/'.join(kinds)} {text!r} in {elems}")


def plan(task: str, instruction: str, elems: list[Elem]) -> list[Action]:
    """The scripted episode: actions that solve ``task``, found by text in ``elems``.

    click-button also clicks one distractor first (a text line, else a text
    input), so that task has a step that does not end the episode too.
    """
    if task == "click-button":
        target = re.fullmatch(r'Click on the "(.*)" button\.', instruction)[1]
        filler = next(
            (
                e
                for e in elems
                if e.kind == "div" and e.text and ":" not in e.text and e.text != instruction
            ),
            None,
        ) or next((e for e in elems if e.kind == "textbox"), None)
        acts: list[Action] = [("click", filler.ref, "")] if filler else []
        return [*acts, ("click", _find(elems, ("button",), target).ref, "")]
    if task == "click-link":
        target = re.fullmatch(r'Click on the link "(.*)"\.', instruction)[1]
        return [("click", _find(elems, ("span", "link"), target).ref, "")]
    if task == "click-checkboxes":
        wanted = re.fullmatch(r"Select (.*) and click Submit\.", instruction)[1]
        names = [] if wanted == "nothing" else wanted.split(", ")
        acts = [("click", _find(elems, ("checkbox",), n).ref, "") for n in names]
        return [*acts, ("click", _find(elems, ("button",), "Submit").ref, "")]
    if task == "enter-text":
        text = re.fullmatch(r'Enter "(.*)" into the text field and press Submit\.', instruction)[1]
        return [
            ("type", _find(elems, ("textbox",)).ref, text),
            ("click", _find(elems, ("button",), "Submit").ref, ""),
        ]
    if task == "login-user":
        user, password = re.fullmatch(
            r'Enter the username "(.*)" and the password "(.*)" into the text fields '
            r"and press login\.",
            instruction,
        ).groups()
        boxes = [e for e in elems if e.kind == "textbox"]
        return [
            ("type", boxes[0].ref, user),
            ("type", boxes[1].ref, password),
            ("click", _find(elems, ("button",), "Login").ref, ""),
        ]
    raise ValueError(f"no scripted policy for {task}")


# ---------------------------------------------------------------- stacks


class Stack:
    """One open env: ``reset`` / ``step`` (the timed calls) and how to read their results."""

    name = ""

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, seed: int) -> Any:
        return self.env.reset(seed=seed)

    def step(self, action: Any) -> Any:
        return self.env.step(action)

    def encode(self, action: Action) -> Any:
        raise NotImplementedError

    def instruction(self, obs: Any) -> str:
        raise NotImplementedError

    def elements(self, obs: Any) -> list[Elem]:
        raise NotImplementedError

    def obs_ok(self, obs: Any, terminated: bool) -> bool:
        raise NotImplementedError

    def viewport(self) -> list[int] | None:
        return None


class FarmStack(Stack):
    """farm's BrowserEnv, in this process or through ``farm.connect``."""

    def __init__(self, env: Any, name: str) -> None:
        super().__init__(env)
        self.name = name

    def encode(self, action: Action) -> str:
        kind, ref, text = action
        if kind == "click":
            return f"click_element({ref})"
        return f"type_element({ref}, {json.dumps(text)})"

    def instruction(self, obs: Any) -> str:
        return obs[0]["instruction"]

    def viewport(self) -> list[int] | None:
        sandbox = getattr(self.env, "sandbox", None)  # in-process only
        return None if sandbox is None else [sandbox.window_width, sandbox.window_height]

    def elements(self, obs: Any) -> list[Elem]:
        return farm_elements(obs[0]["text"])

    def obs_ok(self, obs: Any, terminated: bool) -> bool:
        shot = obs[0]["screenshot"]
        return shot.shape == TASK_SHAPE and shot.dtype == np.uint8 and bool(obs[0]["text"])


def _farm_in_process(name: str, env_kwargs: dict[str, Any]) -> Callable[[str, str], Any]:
    @contextlib.contextmanager
    def stack(task: str, _sock_dir: str) -> Iterator[Stack]:
        env = make(f"miniwob/{task}", **env_kwargs)
        try:
            yield FarmStack(env, name)
        finally:
            env.close()

    return stack


def _farm_grpc(name: str, env_kwargs: dict[str, Any]) -> Callable[[str, str], Any]:
    @contextlib.contextmanager
    def stack(task: str, sock_dir: str) -> Iterator[Stack]:
        sock = f"{task}-{'-'.join(sorted(env_kwargs))}.sock"
        address = f"unix://{os.path.join(sock_dir, sock)}"
        kwargs = json.dumps(env_kwargs) if env_kwargs else None
        with ServerProcess(f"miniwob/{task}", address=address, env_kwargs=kwargs) as srv:
            env = farm.connect(srv.address)
            try:
                yield FarmStack(env, name)
            finally:
                env.close()

    return stack


class PackageStack(Stack):
    """The miniwob package's env (``gymnasium.make("miniwob/<task>-v1")``)."""

    name = "miniwob Selenium"

    def __init__(self, env: Any, name: str) -> None:
        from miniwob.action import ActionTypes

        super().__init__(env)
        self.name = name
        types = env.unwrapped.action_space_config.action_types
        self._click = types.index(ActionTypes.CLICK_ELEMENT)
        self._type = types.index(ActionTypes.FOCUS_ELEMENT_AND_TYPE_TEXT)

    def encode(self, action: Action) -> dict[str, Any]:
        kind, ref, text = action
        if kind == "click":
            return {"action_type": self._click, "ref": ref}
        return {"action_type": self._type, "ref": ref, "text": text}

    def instruction(self, obs: Any) -> str:
        return obs[0]["utterance"]

    def viewport(self) -> list[int] | None:
        instance = self.env.unwrapped.instance  # screenshots are of this, cropped to 160x210
        return [instance.inner_width, instance.inner_height]

    def elements(self, obs: Any) -> list[Elem]:
        return package_elements(obs[0])

    def obs_ok(self, obs: Any, terminated: bool) -> bool:
        o = obs[0]
        if terminated:  # the package's observation after the end is empty by design
            return o["screenshot"].shape == TASK_SHAPE
        return (
            o["screenshot"].shape == TASK_SHAPE
            and o["screenshot"].dtype == np.uint8
            and len(o["dom_elements"]) > 0
            and bool(o["utterance"])
        )


def package_env_vars() -> None:
    """Point the package at Debian's Chromium and ChromeDriver (it reads these)."""
    os.environ["MINIWOB_CHROME_BINARY"] = CHROMIUM
    os.environ["MINIWOB_CHROMEDRIVER"] = CHROMEDRIVER


def _miniwob_selenium(
    name: str, refresh: bool, binary: str = CHROMIUM
) -> Callable[[str, str], Any]:
    @contextlib.contextmanager
    def stack(task: str, _sock_dir: str) -> Iterator[Stack]:
        import gymnasium
        import miniwob

        gymnasium.register_envs(miniwob)
        # headless (render_mode None); refresh_freq=1 reloads the page on every reset.
        # The package starts its browser in make() and reads the binary from the
        # environment then.
        os.environ["MINIWOB_CHROME_BINARY"] = binary
        try:
            env = gymnasium.make(f"miniwob/{task}-v1", refresh_freq=1 if refresh else 0)
        finally:
            os.environ["MINIWOB_CHROME_BINARY"] = CHROMIUM
        try:
            yield PackageStack(env, name)
        finally:
            env.close()

    return stack


STACK_FACTORIES: dict[str, Callable[[str, str], Any]] = {
    "farm in-process": _farm_in_process("farm in-process", {}),
    "farm in-process (no spare)": _farm_in_process(
        "farm in-process (no spare)", {"spare_contexts": False}
    ),
    "farm in-process (60 Hz)": _farm_in_process(
        "farm in-process (60 Hz)", {"unthrottled_frames": False}
    ),
    "farm in-process (reuse page)": _farm_in_process(
        "farm in-process (reuse page)", {"reuse_page": True}
    ),
    "farm gRPC": _farm_grpc("farm gRPC", {}),
    "farm gRPC (reuse page)": _farm_grpc("farm gRPC (reuse page)", {"reuse_page": True}),
    "farm in-process (full Chromium)": _farm_in_process(
        "farm in-process (full Chromium)", {"executable_path": CHROMIUM}
    ),
    BASELINE: _miniwob_selenium(BASELINE, refresh=False),
    RELOAD_STACK: _miniwob_selenium(RELOAD_STACK, refresh=True),
    SHELL_STACK: _miniwob_selenium(SHELL_STACK, refresh=False, binary=HEADLESS_SHELL),
}


# ---------------------------------------------------------------- episodes


class Record:
    """What one stack measured on one task."""

    def __init__(self) -> None:
        self.reset_ns: list[int] = []
        self.step_ns: list[int] = []  # steps that did not end the episode (full observations)
        self.end_step_ns: list[int] = []  # steps that ended it
        self.episodes = 0
        self.solved = 0
        self.bad_obs = 0
        self.instructions: dict[int, str] = {}
        self.errors: list[str] = []
        self.launch_s: float | None = None
        self.viewport: list[int] | None = None  # the browser's viewport (CSS pixels)


def run_episode(
    stack: Stack, task: str, seed: int, rec: Record | None, think_s: float = 0.0
) -> None:
    """One scripted episode; timed into ``rec`` (untimed warm-up when None).

    ``think_s``: untimed pause before every call (a policy choosing its action).
    """
    clock = time.perf_counter_ns
    if think_s:
        time.sleep(think_s)
    t0 = clock()
    obs = stack.reset(seed)
    t1 = clock()
    instruction = stack.instruction(obs)
    actions = plan(task, instruction, stack.elements(obs))
    encoded = [stack.encode(a) for a in actions]
    reward, terminated, bad = 0.0, False, 0
    step_ns: list[tuple[int, bool]] = []
    for action in encoded:
        if think_s:
            time.sleep(think_s)
        s0 = clock()
        result = stack.step(action)
        s1 = clock()
        terminated = bool(result[2])
        reward = float(result[1])
        step_ns.append((s1 - s0, terminated))
        bad += not stack.obs_ok(result, terminated)
        if terminated or result[3]:
            break
    if rec is None:
        return
    rec.reset_ns.append(t1 - t0)
    for ns, ended in step_ns:
        (rec.end_step_ns if ended else rec.step_ns).append(ns)
    rec.episodes += 1
    rec.solved += terminated and reward > 0
    rec.bad_obs += bad
    rec.instructions[seed] = instruction


def time_task(
    task: str,
    stacks: list[str],
    seeds: list[int],
    sock_dir: str,
    console: Console,
    thinks_ms: list[int],
) -> dict[int, dict[str, Record]]:
    """Per think time: per stack, the timed episodes (all stacks open at once)."""
    records = {think: {s: Record() for s in stacks} for think in thinks_ms}
    open_stacks: dict[str, Stack] = {}
    with contextlib.ExitStack() as exit_stack:
        for name in stacks:
            rec = records[thinks_ms[0]][name]
            try:
                t0 = time.perf_counter()
                stack = exit_stack.enter_context(STACK_FACTORIES[name](task, sock_dir))
                run_episode(stack, task, WARMUP_SEED, None)  # launches the browser
                rec.launch_s = time.perf_counter() - t0
                rec.viewport = stack.viewport()
            except Exception as e:  # noqa: BLE001 - one broken stack must not hide the rest
                rec.errors.append(f"{type(e).__name__}: {e}")
                console.print(f"[red]{task} / {name} failed to start:[/] {rec.errors[-1]}")
                continue
            open_stacks[name] = stack
            for think in thinks_ms:
                records[think][name].launch_s = rec.launch_s
                records[think][name].viewport = rec.viewport
        for think in thinks_ms:
            deadline = time.monotonic() + TASK_TIME_LIMIT_S * (1 + think / 100)
            order = list(open_stacks)
            for r, seed in enumerate(seeds):
                if time.monotonic() > deadline:
                    console.print(
                        f"[yellow]{task} (think {think} ms): time limit, "
                        f"stopped after {r} rounds[/]"
                    )
                    break
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    rec = records[think][name]
                    if len(rec.errors) >= 3:
                        continue
                    gc.collect()
                    try:
                        run_episode(open_stacks[name], task, seed, rec, think / 1000)
                    except Exception as e:  # noqa: BLE001
                        rec.errors.append(f"seed {seed}: {type(e).__name__}: {e}")
                        console.print(f"[red]{task} / {name}:[/] {rec.errors[-1]}")
    return records


# ---------------------------------------------------------------- screenshots


def _selenium_driver(width: int, height: int) -> Any:
    """A ChromeDriver session configured as the package configures its headless one."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("headless", "disable-gpu", "no-sandbox", f"window-size={width},{height}"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def _fit_viewport(driver: Any, width: int, height: int) -> list[int]:
    """Resize the window until the viewport is ``width x height`` (headless Chrome keeps
    some of the window for browser UI); returns the viewport size it got."""
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight];")
    for _ in range(3):
        if inner == [width, height]:
            break
        size = driver.get_window_size()
        driver.set_window_size(size["width"] + width - inner[0], size["height"] + height - inner[1])
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight];")
    return inner


_START_JS = "core.endEpisode(0); Math.seedrandom(0); core.startEpisodeReal();"


def time_screenshots(size: str, shots: int, rounds: int, console: Console) -> list[dict[str, Any]]:
    """farm's screenshot path and Selenium's, interleaved, on the click-button page."""
    from PIL import Image

    from env_adapters.browser.miniwob import HTML_DIR

    label, w, h, ww, wh = SHOT_SIZES[size]
    rows: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    size_kw = {"width": w, "height": h, "window_width": ww, "window_height": wh}
    env = make("miniwob/click-button", unthrottled_frames=True, **size_kw)
    env60 = make("miniwob/click-button", unthrottled_frames=False, **size_kw)
    driver = None
    try:
        loop.run_until_complete(env.areset(seed=0))
        loop.run_until_complete(env60.areset(seed=0))
        driver = _selenium_driver(ww, wh)
        driver.get((HTML_DIR / "click-button.html").as_uri())
        driver.execute_script(_START_JS)
        inner = _fit_viewport(driver, ww, wh)

        def farm_shot() -> np.ndarray:
            with env.sandbox.busy():  # no spare context is prepared while timing
                return loop.run_until_complete(env.sandbox.screenshot())

        def farm_shot_60hz() -> np.ndarray:
            with env60.sandbox.busy():
                return loop.run_until_complete(env60.sandbox.screenshot())

        png_sizes: list[int] = []

        def selenium_shot() -> np.ndarray:
            png = driver.get_screenshot_as_png()
            png_sizes.append(len(png))
            with Image.open(io.BytesIO(png)) as img:
                pixels = np.asarray(img.convert("RGB"))
            return np.array(pixels[:h, :w])

        impls = {
            "farm, frames on demand": farm_shot,
            "farm, 60 Hz frames": farm_shot_60hz,
            "Selenium PNG + decode": selenium_shot,
        }
        samples: dict[str, list[int]] = {k: [] for k in impls}
        last: dict[str, np.ndarray] = {}
        for fn in impls.values():  # warm-up
            for _ in range(5):
                fn()
        deadline = time.monotonic() + SCREENSHOT_TIME_LIMIT_S
        per_round = -(-shots // rounds)
        for _ in range(rounds):
            for name, fn in impls.items():
                gc.collect()
                for _ in range(per_round):
                    t0 = time.perf_counter_ns()
                    last[name] = fn()
                    samples[name].append(time.perf_counter_ns() - t0)
                    if time.monotonic() > deadline:
                        break
        for name, s in samples.items():
            row: dict[str, Any] = {"size": size, "label": label, "impl": name}
            row.update(summarize_ns(s))
            row["shape"] = list(last[name].shape)
            row["window"] = [ww, wh]
            if name.startswith("Selenium"):
                row["selenium_inner_size"] = inner
                row["png_bytes_mean"] = float(np.mean(png_sizes)) if png_sizes else None
            row["truncated_by_time_limit"] = len(s) < shots
            rows.append(row)
            console.print(
                f"screenshot {label:26s} {name:28s} p50 {fmt_us(row['p50_us']):>9s}  "
                f"shape {tuple(row['shape'])}"
            )
    except Exception as e:  # noqa: BLE001
        console.print(f"[red]screenshots {size} failed:[/] {type(e).__name__}: {e}")
        rows.append({"size": size, "label": label, "error": f"{type(e).__name__}: {e}"})
    finally:
        if driver is not None:
            driver.quit()
        loop.run_until_complete(env.aclose())
        loop.run_until_complete(env60.aclose())
        loop.close()
    return rows


# ---------------------------------------------------------------- output


def _ms(ns: list[int], q: float) -> float | None:
    return float(np.percentile(np.asarray(ns) / 1e6, q)) if ns else None


def summarize(records: dict[str, dict[str, Record]], stacks: list[str]) -> list[dict[str, Any]]:
    """One row per stack (all tasks pooled), then one per (task, stack)."""
    rows = []
    for task in [None, *records]:
        for name in stacks:
            recs = [records[t][name] for t in records] if task is None else [records[task][name]]
            pool = {
                k: [x for r in recs for x in getattr(r, k)]
                for k in ("reset_ns", "step_ns", "end_step_ns")
            }
            row: dict[str, Any] = {"task": task or "all", "stack": name}
            for k, v in pool.items():
                key = k.replace("_ns", "")
                row[f"{key}_n"] = len(v)
                for q in (50, 99):
                    row[f"{key}_p{q}_ms"] = _ms(v, q)
                row[f"{key}_mean_ms"] = float(np.mean(v) / 1e6) if v else None
            row["episodes"] = sum(r.episodes for r in recs)
            row["solved"] = sum(r.solved for r in recs)
            row["bad_observations"] = sum(r.bad_obs for r in recs)
            row["errors"] = [e for r in recs for e in r.errors]
            if task is not None:
                row["viewport"] = recs[0].viewport
            launches = [r.launch_s for r in recs if r.launch_s is not None]
            row["launch_s_mean"] = float(np.mean(launches)) if launches else None
            rows.append(row)
    base = {r["task"]: r for r in rows if r["stack"] == BASELINE}
    reload = {r["task"]: r for r in rows if r["stack"] == RELOAD_STACK}
    for r in rows:
        b = base.get(r["task"])
        if b is None or not r["stack"].startswith("farm"):
            continue
        for key in ("reset", "step", "end_step"):
            f, bl = r.get(f"{key}_p50_ms"), b.get(f"{key}_p50_ms")
            # speedup = baseline / farm (the target is >= 2); ratio = farm / baseline
            r[f"{key}_speedup_vs_baseline"] = bl / f if f and bl else None
            r[f"{key}_p50_ratio_farm_over_baseline"] = f / bl if f and bl else None
        r["meets_target"] = {
            k: (r[f"{k}_speedup_vs_baseline"] or 0) >= TARGET_SPEEDUP for k in ("reset", "step")
        }
        rl = reload.get(r["task"])
        if rl is not None and rl.get("reset_p50_ms") and r.get("reset_p50_ms"):
            r["reset_speedup_vs_reload"] = rl["reset_p50_ms"] / r["reset_p50_ms"]
    return rows


def same_pages(records: list[dict[str, Record]]) -> dict[str, Any]:
    """Did every stack get the same instruction for the same (task, seed)?"""
    checked = same = 0
    for recs in records:
        by_seed: dict[int, set[str]] = {}
        for rec in recs.values():
            for seed, text in rec.instructions.items():
                by_seed.setdefault(seed, set()).add(text)
        for texts in by_seed.values():
            checked += 1
            same += len(texts) == 1
    return {"episodes_checked": checked, "same_instruction_in_every_stack": same}


def _f(ms: float | None) -> str:
    return "" if ms is None else fmt_us(ms * 1000)


def _x(v: float | None, target: bool = True) -> str:
    if v is None:
        return ""
    if not target:
        return f"{v:.2f}x"
    verdict = "[green]PASS[/]" if v >= TARGET_SPEEDUP else "[red]FAIL[/]"
    return f"{v:.2f}x {verdict}"


def render(
    rows: list[dict[str, Any]], shots: list[dict[str, Any]], info: dict[str, Any], console: Console
) -> None:
    for think in sorted({r["think_ms"] for r in rows}):
        render_latency([r for r in rows if r["think_ms"] == think], think, info, console)
    render_screenshots(shots, console)
    print_foreign_load(console, info)


def render_latency(
    rows: list[dict[str, Any]], think: int, info: dict[str, Any], console: Console
) -> None:
    table = Table(
        title=f"MiniWoB++ reset / step latency, think {think} ms between calls, "
        f"{len(info['tasks'])} tasks, same seeds "
        f"({info['cpu_count']} CPUs, Chromium {info['chromium']}, {info['date']})"
    )
    cols = (
        "stack",
        "reset p50",
        "reset p99",
        "step p50",
        "step p99",
        "end step p50",
        "solved",
        "reset: base/farm",
        "step: base/farm",
        "reset: reload/farm",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "stack" else "right")
    for r in (r for r in rows if r["task"] == "all"):
        table.add_row(
            r["stack"],
            _f(r["reset_p50_ms"]),
            _f(r["reset_p99_ms"]),
            _f(r["step_p50_ms"]),
            _f(r["step_p99_ms"]),
            _f(r["end_step_p50_ms"]),
            f"{r['solved']}/{r['episodes']}",
            _x(r.get("reset_speedup_vs_baseline")),
            _x(r.get("step_speedup_vs_baseline")),
            _x(r.get("reset_speedup_vs_reload"), target=False),
        )
    console.print(table)

    per_task = Table(
        title=f"think {think} ms, per task: p50 (steps n = steps that did not end the episode)"
    )
    for col in ("task", "stack", "reset", "step", "steps n", "end step", "reset b/f", "step b/f"):
        per_task.add_column(col, justify="left" if col in ("task", "stack") else "right")
    last = None
    for r in (r for r in rows if r["task"] != "all"):
        if last is not None and r["task"] != last:
            per_task.add_section()
        last = r["task"]
        per_task.add_row(
            r["task"],
            r["stack"],
            _f(r["reset_p50_ms"]),
            _f(r["step_p50_ms"]),
            str(r["step_n"]),
            _f(r["end_step_p50_ms"]),
            _x(r.get("reset_speedup_vs_baseline"), target=False),
            _x(r.get("step_speedup_vs_baseline"), target=False),
        )
    console.print(per_task)


def render_screenshots(shots: list[dict[str, Any]], console: Console) -> None:
    shot_table = Table(title="one screenshot: capture + decode into HxWx3 uint8")
    for col in ("size", "implementation", "p50", "p99", "mean", "PNG bytes"):
        shot_table.add_column(col, justify="left" if col in ("size", "implementation") else "right")
    for r in shots:
        if "error" in r:
            shot_table.add_row(r["label"], "error", r["error"][:60], "", "", "")
            continue
        png = r.get("png_bytes_mean")
        shot_table.add_row(
            r["label"],
            r["impl"],
            fmt_us(r["p50_us"]),
            fmt_us(r["p99_us"]),
            fmt_us(r["mean_us"]),
            f"{png / 1000:.1f} kB" if png else "",
        )
    console.print(shot_table)


def _tool_version(binary: str) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\d+(\.\d+)+", out.stdout)
    return m.group(0) if m else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="MiniWoB++ browser latency (see module doc)")
    p.add_argument(
        "--quick", action="store_true", help="4 episodes per task and stack, fewer shots"
    )
    p.add_argument("--episodes", type=int, help="timed episodes per task and stack (default 12)")
    p.add_argument("--seed-base", type=int, default=0, help="episodes use seeds base, base+1, ...")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {TASKS}")
    p.add_argument(
        "--stacks", default=",".join(STACKS), help=f"comma-separated, of {list(STACK_FACTORIES)}"
    )
    p.add_argument(
        "--shots", type=int, help="timed screenshots per size and implementation (default 100)"
    )
    p.add_argument(
        "--sizes", default=",".join(SHOT_SIZES), help="screenshot sizes: 160x210,1280x720 or none"
    )
    p.add_argument(
        "--think-ms",
        default="0,300",
        help="comma-separated untimed pauses before every call, one scenario each (default 0,300)",
    )
    p.add_argument("--json", default="browser.json", help="file name under bench/results/")
    args = p.parse_args(argv)

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    stacks = [s.strip() for s in args.stacks.split(",") if s.strip()]
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip() and s.strip() != "none"]
    for t in tasks:
        if t not in TASKS:
            p.error(f"no scripted policy for task {t!r}")
    for s in stacks:
        if s not in STACK_FACTORIES:
            p.error(f"unknown stack {s!r}")
    for s in sizes:
        if s not in SHOT_SIZES:
            p.error(f"unknown screenshot size {s!r}")
    thinks_ms = [int(t) for t in args.think_ms.split(",") if t.strip()]
    if not thinks_ms or min(thinks_ms) < 0:
        p.error("--think-ms needs one or more pauses >= 0")
    episodes = args.episodes or (4 if args.quick else 12)
    shots = args.shots or (40 if args.quick else 100)
    seeds = [args.seed_base + i for i in range(episodes)]
    package_env_vars()

    console = Console(width=max(Console().width, 170))
    info = machine_info()
    info.update(
        chromium=_tool_version(CHROMIUM),
        chromedriver=_tool_version(CHROMEDRIVER),
        playwright=_safe_version("playwright"),
        selenium=_safe_version("selenium"),
        miniwob=_safe_version("miniwob"),
        pillow=_safe_version("pillow"),
        tasks=tasks,
    )
    warn_if_busy(info, console)
    records: dict[int, dict[str, dict[str, Record]]] = {think: {} for think in thinks_ms}
    shot_rows: list[dict[str, Any]] = []
    phases: dict[str, float] = {}  # foreign CPU share per task / screenshot size
    walls: dict[str, float] = {}
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farm-bench-") as sock_dir, ForeignLoad() as foreign:
        for task in tasks:
            t0, f0 = time.monotonic(), foreign.cpu_s()
            by_think = time_task(task, stacks, seeds, sock_dir, console, thinks_ms)
            phases[task] = foreign.fraction(foreign.cpu_s() - f0, time.monotonic() - t0)
            walls[task] = time.monotonic() - t0
            for think, recs in by_think.items():
                records[think][task] = recs
                for name, rec in recs.items():
                    console.print(
                        f"{task:17s} think {think:3d} ms {name:24s} reset p50 "
                        f"{_f(_ms(rec.reset_ns, 50)):>9s}  step p50 "
                        f"{_f(_ms(rec.step_ns, 50)):>9s}  solved {rec.solved}/{rec.episodes}"
                    )
        for size in sizes:
            t0, f0 = time.monotonic(), foreign.cpu_s()
            shot_rows += time_screenshots(size, shots, 5, console)
            phases[f"screenshots {size}"] = foreign.fraction(
                foreign.cpu_s() - f0, time.monotonic() - t0
            )
            walls[f"screenshots {size}"] = time.monotonic() - t0
        info["foreign_cpu_fraction"] = foreign.fraction(
            foreign.cpu_s(), time.monotonic() - foreign.t0
        )
    info["foreign_cpu_fraction_by_phase"] = phases
    info["loadavg_at_end"] = list(os.getloadavg())
    rows = [
        {"think_ms": think, **row}
        for think in thinks_ms
        for row in summarize(records[think], stacks)
    ]
    render(rows, shot_rows, info, console)
    pages = same_pages([recs for by_task in records.values() for recs in by_task.values()])
    console.print(
        f"same seed, same page: {pages['same_instruction_in_every_stack']}/"
        f"{pages['episodes_checked']} (task, seed) pairs had the same instruction in every stack"
    )
    out = write_json(
        args.json,
        {
            "benchmark": "browser",
            "machine": info,
            "config": {
                "tasks": tasks,
                "stacks": stacks,
                "baseline": BASELINE,
                "seeds": seeds,
                "warmup_seed": WARMUP_SEED,
                "screenshot_shots": shots,
                "screenshot_sizes": {k: SHOT_SIZES[k] for k in sizes},
                "target_speedup": TARGET_SPEEDUP,
                "think_ms": thinks_ms,
                "wall_s": time.monotonic() - t_start,
                "wall_s_by_phase": walls,
            },
            "same_pages": pages,
            "rows": rows,
            "screenshots": shot_rows,
            "samples_us": {
                f"think {think} ms": {
                    task: {
                        name: {
                            "reset": [round(x / 1e3) for x in rec.reset_ns],
                            "step": [round(x / 1e3) for x in rec.step_ns],
                            "end_step": [round(x / 1e3) for x in rec.end_step_ns],
                        }
                        for name, rec in recs.items()
                    }
                    for task, recs in by_task.items()
                }
                for think, by_task in records.items()
            },
        },
    )
    console.print(f"wrote {out} ({time.monotonic() - t_start:.0f} s)")
    return 0


def _safe_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
