"""The desktop sandbox in process, on real Xvfb with real apps: display, input, capture,
reset, bad input (off-screen, unknown keys, crashing/hanging apps, throwing checkers),
and cleanup (no Xvfb, app, lock file or directory left behind).

Prerequisites (Xvfb, openbox, xterm, mousepad, galculator, xclip, python-xlib, mss)
are installed by scripts/bootstrap; when one is missing these tests fail saying which.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil
import pytest

from env_adapters.desktop.display import missing_prerequisites

pytestmark = pytest.mark.desktop

# fail (not skip) saying what to install when a prerequisite is missing
if (_missing := missing_prerequisites()) is not None:
    pytest.fail(_missing, pytrace=False)

from env_adapters.desktop.context import TaskContext  # noqa: E402
from env_adapters.desktop.display import Desktop  # noqa: E402
from env_adapters.desktop.env import DesktopEnv, DesktopTask  # noqa: E402
from env_adapters.desktop.tasks import SPECS, make_env  # noqa: E402
from env_adapters.gui.tasks import TaskSpec  # noqa: E402
from farm.env import TRUNCATED_REASON  # noqa: E402


@pytest.fixture
def terminal() -> Iterator[DesktopEnv]:
    env = make_env("terminal-create-file")
    yield env
    env.close()


def test_desktop_start_and_close_leave_nothing_behind() -> None:
    d = Desktop()
    d.start()
    try:
        assert d.running and d.home.is_dir()
        root, files = d.root, d.display_files()
        assert f"/tmp/.X11-unix/X{d.display_number}" in map(str, files)  # its own display
        app = d.launch(["sleep", "300"])
        pids = d.process_ids()
        assert app.pid in pids and len(pids) >= 4  # Xvfb, dbus, openbox, sleep
        d.kill_apps()
        assert app.pid not in d.process_ids() and d.process_ids(apps_only=True) == []
    finally:
        d.close()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)
    assert d.display_files() == [] and root is not None and not root.exists()


def test_reset_observation_and_home_restored(terminal: DesktopEnv) -> None:
    obs, info = terminal.reset(seed=3)
    assert obs["screenshot"].shape == (720, 1280, 3) and obs["screenshot"].dtype == np.uint8
    assert obs["screenshot"].std() > 5  # a window is drawn
    assert info["reset_s"] > 0 and info["task"] == "desktop/terminal-create-file"
    assert obs["text"].startswith('[1] window "xterm" class="xterm" focused @(')
    assert json.loads(obs["metadata"])["active_window"] == "xterm"
    junk = terminal.desktop.home / "junk.txt"
    junk.write_text("left over")
    first_xterm = terminal.desktop.apps[0].pid
    obs2, _ = terminal.reset(seed=3)
    assert not junk.exists()  # home restored from the template
    assert not psutil.pid_exists(first_xterm) or psutil.Process(first_xterm).status() == "zombie"
    assert obs2["instruction"] == obs["instruction"]  # same seed, same episode


def test_typing_and_keys_reach_the_app(terminal: DesktopEnv) -> None:
    terminal.reset(seed=0)
    target = terminal.desktop.home / "typed.txt"
    # a non-ASCII character is bound to a spare keycode for its key press
    _obs, reward, term, trunc, info = terminal.step('type("echo caf\\u00e9 > ~/typed.txt")')
    assert (reward, term, trunc) == (0.0, False, False) and "action_error" not in info
    terminal.step('key("Enter")')
    deadline = time.monotonic() + 5
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.read_text() == "café\n"


def test_mouse_actions_and_click_element(terminal: DesktopEnv) -> None:
    terminal.reset(seed=0)
    for action in (
        "click(640, 360)",
        "double_click(640, 360)",
        "right_click(10, 10)",
        "move(5, 5)",
        "drag(300, 300, 400, 400)",
        "scroll(640, 360, 0, 300)",
        "click_element(1)",
        'type_element(1, "ls")',
        "wait(10)",
    ):
        _obs, _reward, term, trunc, info = terminal.step(action)
        assert "action_error" not in info, (action, info)
        assert not term and not trunc


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("click(1280, 5)", "outside the 1280x720 screen"),
        ("drag(5, 5, 5, 900)", "drag end (5, 900) is outside the 1280x720 screen"),
        ("scroll(-1, 5, 0, 10)", "outside the 1280x720 screen"),
        ('key("ctrl+nosuchkey")', "unknown key 'nosuchkey'"),
        ('key("hyper+a")', "unknown modifier 'hyper'"),
        ("click_element(99)", "no element with ref 99; refs in the text view are 1"),
        ('select_element(1, "x")', "select_element needs a list element"),
        ("wait(100000)", "wait(ms) takes"),
        ("bogus(1)", "unknown action 'bogus'"),
    ],
)
def test_bad_actions_are_noop_steps_with_a_reason(
    terminal: DesktopEnv, action: str, message: str
) -> None:
    terminal.reset(seed=0)
    obs, reward, term, trunc, info = terminal.step(action)
    assert message in info["action_error"]
    assert (reward, term, trunc) == (0.0, False, False)
    assert message in json.loads(obs["metadata"])["action_error"]
    # the sandbox keeps serving
    obs, reward, term, trunc, info = terminal.step("move(10, 10)")
    assert "action_error" not in info


def test_long_text_is_refused() -> None:
    env = make_env("terminal-create-file", max_type_chars=10)
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step('type("' + "x" * 11 + '")')
        assert "longer than the limit of 10 characters" in info["action_error"]
    finally:
        env.close()


def _truncated_then_clean_reset(env: DesktopEnv, expect: str) -> None:
    obs, reward, term, trunc, info = env.step("move(20, 20)")
    assert trunc and not term and reward == 0.0, info
    assert expect in info[TRUNCATED_REASON], info
    obs, info = env.reset(seed=1)  # clean: a fresh app, nothing of the old one
    assert "xterm" in obs["text"] or "mousepad" in obs["text"]
    obs, reward, term, trunc, info = env.step("move(30, 30)")
    assert not trunc and "action_error" not in info, info


def test_app_that_crashes_truncates_with_its_name(terminal: DesktopEnv) -> None:
    terminal.reset(seed=0)
    app = terminal.desktop.apps[0]
    os.kill(app.pid, signal.SIGKILL)
    app.proc.wait(5)
    _truncated_then_clean_reset(terminal, f"app xterm (pid {app.pid}) killed by SIGKILL")


def test_app_that_hangs_truncates() -> None:
    env = make_env("editor-line-numbers", hang_timeout_s=1.0)
    try:
        env.reset(seed=0)
        app = env.desktop.apps[0]
        os.kill(app.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        _truncated_then_clean_reset(env, f"app mousepad (pid {app.pid})")
        assert time.monotonic() - t0 < 15
    finally:
        env.close()


def test_busy_app_that_does_not_answer_pings_is_hung() -> None:
    """A GTK app whose main loop is blocked (SIGSTOP on all threads looks the same to X;
    here only the ping path is used: the process state check is bypassed)."""
    env = make_env("editor-line-numbers", hang_timeout_s=0.5)
    try:
        env.reset(seed=0)
        assert env.ctx is not None
        watched = env.ctx.watched[0]
        assert watched.window is not None and env._pinger is not None
        assert env._pinger.ping(watched.window, 2.0)  # answers while alive
        os.kill(watched.app.pid, signal.SIGSTOP)
        try:
            assert not env._pinger.ping(watched.window, 0.5)
        finally:
            os.kill(watched.app.pid, signal.SIGCONT)
        assert env._pinger.ping(watched.window, 2.0)
    finally:
        env.close()


class ThrowingChecker(DesktopTask):
    def setup(self, ctx: TaskContext, rng: np.random.Generator) -> str:
        ctx.launch(("xterm",), wm_class="xterm")
        return "Do anything, then declare done()."

    def check(self, ctx: TaskContext) -> tuple[float, dict[str, Any]]:
        raise KeyError("no such field")


def test_checker_that_throws_truncates_and_the_next_reset_is_clean() -> None:
    spec = TaskSpec(id="desktop/throwing", kind="desktop", instruction=None)
    env = DesktopEnv(spec, desktop_task=ThrowingChecker())
    try:
        env.reset(seed=0)
        obs, reward, term, trunc, info = env.step("done()")
        assert trunc and not term and reward == 0.0
        assert "checker: the checker of desktop/throwing raised KeyError" in info[TRUNCATED_REASON]
        obs, _ = env.reset(seed=1)
        assert obs["text"].count("window") == 1
        assert env.step("move(1, 1)")[3] is False
    finally:
        env.close()


def test_xvfb_crash_truncates_and_the_next_reset_relaunches(terminal: DesktopEnv) -> None:
    terminal.reset(seed=0)
    old = terminal.desktop._xvfb
    assert old is not None
    os.kill(old.pid, signal.SIGKILL)
    old.wait(5)
    obs, _reward, _term, trunc, info = terminal.step("move(5, 5)")
    assert trunc and "sandbox:" in info[TRUNCATED_REASON] and "Xvfb" in info[TRUNCATED_REASON]
    obs, info = terminal.reset(seed=0)
    assert terminal.desktop._xvfb is not old and obs["text"].startswith("[1] window")


def test_close_leaves_nothing_behind() -> None:
    env = make_env("window-close")
    env.reset(seed=0)
    desktop = env.desktop
    pids, root, files = desktop.process_ids(), desktop.root, desktop.display_files()
    assert len(pids) >= 6 and files  # Xvfb, bus, wm, three xterms and their shells
    env.close()
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert alive == []
    assert root is not None and not root.exists()
    assert all(not f.exists() for f in files)


def test_suite_shape() -> None:
    feasible = [s for s in SPECS.values() if s.feasible]
    infeasible = [s for s in SPECS.values() if not s.feasible]
    assert len(feasible) >= 12 and len(infeasible) >= 2
    assert all(s.kind == "desktop" and s.id.startswith("desktop/") for s in SPECS.values())
    checkers = {s.evaluator["name"] for s in feasible}
    assert {"file-content", "clipboard", "window-title", "process-state", "settings"} <= checkers
