"""One small browser farm: a MiniWoB++ sandbox leased, played, SIGKILLed, replaced,
with its whole process group (Chromium included) gone."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator

import psutil
import pytest
from helpers import wait_until

import farm
from orchestration.client import FarmClient
from orchestration.runtime import BackgroundController
from orchestration.spec import parse_spec

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def _group(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.info["pid"])
        except (ProcessLookupError, psutil.Error):
            pass
    return out


@pytest.fixture
def state() -> Iterator[str]:
    """A state dir for the farm (short: socket paths must stay < 108 bytes)."""
    path = tempfile.mkdtemp(prefix="fbr-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_browser_sandbox_is_replaced_with_its_chromium(state: str) -> None:
    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("needs Chromium at /usr/bin/chromium")
    spec = parse_spec(
        {
            "state_dir": state,
            "sandboxes": [{"kind": "browser", "env": "miniwob/click-button", "count": 1}],
        }
    )
    with BackgroundController(spec) as bg:
        bg.wait_healthy(120)
        client = FarmClient(bg.address)
        with client.lease("browser") as lease:
            env = farm.connect(lease.endpoint, reconnect_timeout_s=0.5)
            obs, _ = env.reset(seed=0)
            assert obs["instruction"]
            leader = client.status().sandboxes[0].pid
            wait_until(lambda: len(_group(leader)) > 1, timeout=30)  # Chromium runs in it
            t_kill = time.monotonic()
            os.kill(leader, signal.SIGKILL)  # only the leader: Chromium is left to us
            _, _, _, truncated, info = env.step("click(10, 10)")
            assert truncated and "farm.truncated_reason" in info
            env.close()
            wait_until(lambda: lease.lost is not None, timeout=10)
        s = wait_until(
            lambda: (
                (st := client.status().sandboxes[0]).state == "healthy"
                and st.incarnation == 2
                and st
            ),
            timeout=60,
        )
        print(f"\nbrowser sandbox healthy again {time.monotonic() - t_kill:.2f} s after the kill")
        assert s.restarts == 1
        wait_until(lambda: _group(leader) == [], timeout=10)  # the old group is gone
        client.close()
