"""Which Chromium a sandbox runs: the headless shell for headless sandboxes where it is
installed, the full browser otherwise, ``$FARM_CHROMIUM`` over both."""

from __future__ import annotations

import os

import psutil
import pytest

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

from env_adapters.browser import chromium
from env_adapters.browser.chromium import (
    CHROMIUM,
    HEADLESS_SHELL,
    ChromiumSandbox,
    default_executable,
)


def test_the_choice(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("FARM_CHROMIUM", raising=False)
    shell = tmp_path / "chromium-headless-shell"
    shell.write_text("")
    monkeypatch.setattr(chromium, "HEADLESS_SHELL", str(shell))
    assert default_executable(headless=True) == str(shell)
    assert default_executable(headless=False) == CHROMIUM  # a window needs the full browser
    shell.unlink()
    assert default_executable(headless=True) == CHROMIUM  # not installed
    monkeypatch.setenv("FARM_CHROMIUM", "/opt/my/chrome")
    assert default_executable(headless=True) == "/opt/my/chrome"
    assert default_executable(headless=False) == "/opt/my/chrome"
    assert ChromiumSandbox(width=8, height=8).executable_path == "/opt/my/chrome"
    explicit = ChromiumSandbox(width=8, height=8, executable_path=CHROMIUM)
    assert explicit.executable_path == CHROMIUM


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(HEADLESS_SHELL), reason=f"needs {HEADLESS_SHELL}")
def test_a_default_env_runs_the_headless_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FARM_CHROMIUM", raising=False)
    from farm.registry import make

    env = make("miniwob/click-button")
    try:
        obs, _ = env.reset(seed=0)
        sandbox = env.unwrapped.sandbox
        assert sandbox.executable_path == HEADLESS_SHELL
        pid = sandbox.browser_pid
        assert pid is not None
        assert os.path.realpath(psutil.Process(pid).exe()) == os.path.realpath(HEADLESS_SHELL)
        assert obs["screenshot"].shape == (210, 160, 3) and obs["screenshot"].any()
        assert "button" in obs["text"].lower()
    finally:
        env.close()
