"""Frames on demand: still MiniWoB++ tasks draw frames when asked, not at 60 Hz.

The choice follows the task (``setup["still"]``, from
:data:`env_adapters.browser.miniwob.ANIMATED_TASKS`); an explicit
``unthrottled_frames`` wins. Frames on demand change no observation (same pixels,
same text, same rewards for the same seed and actions) and cost no CPU while a
still page idles; on an animated page they would (which is why those keep 60 Hz).
In-process ``BrowserEnv``s and real Chromium.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

from env_adapters.browser import miniwob as M  # noqa: E402
from env_adapters.browser.oracles import SUITE  # noqa: E402
from farm.registry import make  # noqa: E402


def idle_cores(env: M.BrowserEnv, seconds: float = 1.0) -> float:
    """CPU cores the env's whole Chromium process tree uses while nobody acts."""
    time.sleep(0.5)  # the first frames after reset
    cpu = env.sandbox.cpu_seconds
    c0, t0 = cpu(), time.perf_counter()
    time.sleep(seconds)
    return (cpu() - c0) / (time.perf_counter() - t0)


def test_the_task_decides_and_an_explicit_choice_wins() -> None:
    assert M.task_spec("click-button").setup["still"] is True
    assert M.task_spec("chase-circle").setup["still"] is False
    for env_id, kwargs, frames in [
        ("miniwob/click-button", {}, "on demand"),
        ("miniwob/chase-circle", {}, "60 Hz"),
        ("miniwob/click-button", {"unthrottled_frames": False}, "60 Hz"),
        ("miniwob/suite", {}, "60 Hz"),  # the whole suite includes animated tasks
        ("miniwob/suite", {"tasks": ["click-button", "enter-text"]}, "on demand"),
    ]:
        env = make(env_id, **kwargs)
        try:
            _, info = env.reset(seed=0)
            assert info["frames"] == frames, (env_id, kwargs)
        finally:
            env.close()


def test_frames_on_demand_change_no_observation() -> None:
    """Same seeds, same oracle actions: identical screenshots, text, rewards."""
    envs = [make("miniwob/click-checkboxes", unthrottled_frames=on) for on in (True, False)]
    try:
        for seed in (0, 1, 2):
            traces = []
            for env in envs:
                oracle = SUITE.oracle_for("miniwob/click-checkboxes")
                oracle.reset()
                obs, _ = env.reset(seed=seed)
                trace = [(obs["screenshot"], obs["text"], 0.0)]
                for _ in range(20):
                    obs, reward, terminated, truncated, _ = env.step(oracle.act(obs))
                    trace.append((obs["screenshot"], obs["text"], float(reward)))
                    if terminated or truncated:
                        break
                traces.append(trace)
            on_demand, at_60hz = traces
            assert len(on_demand) == len(at_60hz) > 2
            assert on_demand[-1][2] > 0  # solved
            for (pix_a, text_a, r_a), (pix_b, text_b, r_b) in zip(on_demand, at_60hz, strict=True):
                assert text_a == text_b and r_a == r_b
                np.testing.assert_array_equal(pix_a, pix_b)
    finally:
        for env in envs:
            env.close()


def test_a_still_page_idles_and_an_animated_one_would_not() -> None:
    still = make("miniwob/click-checkboxes")
    moving = make("miniwob/chase-circle", unthrottled_frames=True)  # against the list
    try:
        still.reset(seed=0)
        moving.reset(seed=0)
        quiet = idle_cores(still)
        busy = idle_cores(moving)
    finally:
        still.close()
        moving.close()
    assert quiet < 0.15, f"a still page with frames on demand used {quiet:.2f} cores idle"
    assert busy > 0.3, f"chase-circle with frames on demand used only {busy:.2f} cores"
