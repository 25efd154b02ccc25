"""Spare browser contexts: the next episode's context (and page) is prepared in the
sandbox's idle time, and episodes stay as isolated and as deterministic as without.

In-process ``BrowserEnv``s (the sync facade); real Chromium.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

from env_adapters.browser.env import make_page_env, seeded_random_js  # noqa: E402
from farm.registry import make  # noqa: E402

# counts its visits in localStorage and a cookie; draws a random number while loading
PAGE = """<!DOCTYPE html>
<html><head><script>
const n = Number(localStorage.getItem('n') || 0) + 1;
localStorage.setItem('n', String(n));
const c = Number((document.cookie.match(/c=(\\d+)/) || [0, 0])[1]) + 1;
document.cookie = 'c=' + c;
document.title = 'storage ' + n + ' cookie ' + c + ' random ' + Math.random().toFixed(9);
</script></head>
<body><button onclick="window.done = true">Done</button></body></html>
"""
THINK_S = 1.5  # an agent's thinking time: long enough for every stage on a busy machine


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("spare") / "page.html"
    path.write_text(PAGE)
    return str(path)


def page_env(page: str, *, preload: bool = False) -> Any:
    env = make_page_env(page, done="window.done === true", width=300, height=200)
    env.page_task.preload = preload
    return env


def think(env: Any, seconds: float, calls: int) -> None:
    """``calls`` steps, each after ``seconds`` of thinking: the gate learns the gap."""
    for _ in range(calls):
        time.sleep(seconds)
        env.step("wait(10)")


def test_thinking_time_prepares_a_fresh_context(page: str) -> None:
    env = page_env(page)
    try:
        _, info = env.reset(seed=1)
        assert info["browser_context"] == "new"
        assert not env.sandbox.idle.may_start("page")  # no long gaps seen yet
        think(env, THINK_S, 4)
        first = env.step("wait(10)")[0]["instruction"]
        deadline = time.monotonic() + THINK_S
        while time.monotonic() < deadline and not env.sandbox._spare.done():
            time.sleep(0.05)
        assert env.sandbox._spare.done()  # prepared while the "agent" thought
        obs, info = env.reset(seed=1)
        assert info["browser_context"] == "spare"
        # a fresh context: storage and cookies of the last episode are gone, and the
        # page drew the same random number for the same seed as when loaded from scratch
        assert obs["instruction"] == first
        assert obs["instruction"].startswith("storage 1 cookie 1 random ")
        think(env, THINK_S, 3)
        obs, _ = env.reset(seed=2)
        assert obs["instruction"].startswith("storage 1 cookie 1 random ")
        assert obs["instruction"] != first  # another seed, another load-time number
    finally:
        env.close()


def test_back_to_back_calls_leave_no_room_for_background_work(page: str) -> None:
    env = page_env(page)
    try:
        sources = []
        for seed in range(6):
            obs, info = env.reset(seed=seed)
            sources.append(info["browser_context"])
            assert obs["instruction"].startswith("storage 1 cookie 1 random ")
            env.step("wait(10)")
            # the spare exists but waits: no gap long enough was ever seen
            assert not env.sandbox.idle.may_start("context")
            assert not env.sandbox._spare.done()
        assert set(sources) <= {"new", "spare"}
        browser = env.sandbox._browser
        # the episode's context, at most one closing in the background, one spare
        assert len(browser.contexts) <= 3
    finally:
        env.close()


def test_a_preloaded_page_is_reseeded_at_start(page: str) -> None:
    """A preloaded page loaded with seed 0; the episode's numbers follow its own seed."""
    env = page_env(page, preload=True)
    try:
        env.reset(seed=5)
        think(env, THINK_S, 4)
        time.sleep(THINK_S)
        obs, info = env.reset(seed=7)
        assert info["browser_context"] == "preloaded"
        assert obs["instruction"].startswith("storage 1 cookie 1 random ")
        evaluate = env.sandbox.page.evaluate
        drawn = env._run(evaluate("[Math.random(), Math.random()]"))
        expected = env._run(evaluate(seeded_random_js(7) + " [Math.random(), Math.random()]"))
        other = env._run(evaluate(seeded_random_js(8) + " [Math.random(), Math.random()]"))
    finally:
        env.close()
    assert drawn == expected
    assert drawn != other


def test_miniwob_episodes_are_the_same_from_a_preloaded_page() -> None:
    """Same seed: same instruction and the same pixels, preloaded or loaded at reset."""
    env = make("miniwob/click-checkboxes")
    try:
        env.reset(seed=0)
        think(env, THINK_S, 4)
        time.sleep(THINK_S)
        preloaded, info = env.reset(seed=11)
        assert info["browser_context"] == "preloaded"
    finally:
        env.close()
    env = make("miniwob/click-checkboxes")
    try:
        fresh, info = env.reset(seed=11)
        assert info["browser_context"] == "new"
    finally:
        env.close()
    assert preloaded["instruction"] == fresh["instruction"]
    assert preloaded["text"] == fresh["text"]
    np.testing.assert_array_equal(preloaded["screenshot"], fresh["screenshot"])


def test_with_thinking_time_the_last_context_closes_between_calls(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reset adopts the spare and hurries only the spare's stages: the retired context
    closes in the next idle gap, not alongside the new episode's first calls."""
    from env_adapters.browser import chromium

    env = page_env(page, preload=True)
    started_during_a_call: list[bool] = []
    close = chromium._close_context

    async def spy(context: Any) -> None:
        started_during_a_call.append(env.sandbox.idle._busy > 0)
        await close(context)

    monkeypatch.setattr(chromium, "_close_context", spy)
    try:
        for seed in range(3):
            time.sleep(THINK_S)
            env.reset(seed=seed)
            think(env, THINK_S, 2)
        assert len(started_during_a_call) >= 2  # the first two episodes' contexts
        assert not any(started_during_a_call), started_during_a_call
    finally:
        env.close()


def test_hurry_lifts_the_gate_for_its_stages_only() -> None:
    from env_adapters.browser.idle import IdleGate

    gate = IdleGate(min_idle_s=0.0)
    with gate.busy():
        assert not gate.may_start("load") and not gate.may_start("close")
        with gate.hurry("context", "page", "load"):
            assert gate.may_start("load") and gate.may_start("context")
            assert not gate.may_start("close")
        assert not gate.may_start("load")
        with gate.hurry("close"):
            assert gate.may_start("close") and not gate.may_start("load")
