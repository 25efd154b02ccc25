"""A custom local page served through gRPC: navigation away, a hanging page, popups,
form actions; after each failure the same session resets and plays normally.

The page is served by ``farm serve env_adapters.browser.env:make_page_env``
with a 5 s operation timeout (so a hung page is noticed quickly).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

import farm  # noqa: E402
from env_adapters.browser.env import make_page_env  # noqa: E402
from farm.server.process import ServerProcess  # noqa: E402

PAGE = """<!DOCTYPE html>
<html><head><title>Form task</title></head>
<body>
<h1>Form task</h1>
<p>Type <b>Ada</b> and press Finish.</p>
<label for="name">Name</label> <input id="name" placeholder="your name">
<label><input type="checkbox" id="agree"> I agree</label>
<select id="color"><option>Red</option><option value="b">Blue</option></select>
<button id="finish" onclick="window.score = document.getElementById('name').value === 'Ada'
  ? 1 : 0.25; window.finished = true;">Finish</button>
<button id="hang" onclick="while (true) {}">Hang</button>
<a id="leave" href="other.html">Leave</a>
<button id="away" onclick="location.href = 'http://example.com/'">Away</button>
<button id="popup" onclick="window.open('other.html')">Popup</button>
<div style="display: none">hidden words</div>
</body></html>
"""
OP_TIMEOUT_S = 5


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pages")
    (root / "page.html").write_text(PAGE)
    (root / "other.html").write_text("<html><body><p>another page</p></body></html>")
    return root


def env_kwargs(page: str) -> dict[str, Any]:
    return {
        "page": page,
        "reward": "window.score || 0",
        "done": "window.finished === true",
        "op_timeout_s": OP_TIMEOUT_S,
        "width": 400,
        "height": 300,
    }


def env_kwargs_without_page() -> dict[str, Any]:
    return {k: v for k, v in env_kwargs("").items() if k != "page"}


@pytest.fixture(scope="module")
def server(sock_dir: str, pages: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(
        "env_adapters.browser.env:make_page_env",
        address=f"unix://{sock_dir}/page.sock",
        env_kwargs=json.dumps(env_kwargs(str(pages / "page.html"))),
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def env(server: ServerProcess) -> Iterator[Any]:
    remote = farm.connect(server.address)
    yield remote
    remote.close()


def ref(obs: dict[str, Any], role: str, name: str) -> int:
    for line in obs["text"].splitlines():
        if f"] {role} {json.dumps(name)}" in line:
            return int(line[1 : line.index("]")])
    raise AssertionError(f"no {role} {name!r} in\n{obs['text']}")


def solve(env: Any) -> None:
    """A normal episode: type the name, finish, reward 1."""
    obs, info = env.reset(seed=0)
    assert obs["instruction"] == "Form task"  # the page title
    obs, reward, terminated, truncated, info = env.step(
        f'type_element({ref(obs, "textbox", "Name")}, "Ada")'
    )
    assert (reward, terminated, truncated) == (0.0, False, False), info
    assert 'textbox "Name" value="Ada"' in obs["text"]
    obs, reward, terminated, truncated, info = env.step(
        f"click_element({ref(obs, 'button', 'Finish')})"
    )
    assert (reward, terminated, truncated) == (1.0, True, False), info


def test_text_view_lists_visible_elements(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    text = obs["text"]
    assert 'heading "Form task"' in text
    assert 'p "Type Ada and press Finish."' in text
    assert 'textbox "Name" value=""' in text
    assert 'checkbox "I agree" value="unchecked"' in text
    assert 'combobox "" value="Red" options=["Red","Blue"]' in text
    assert 'link "Leave"' in text
    assert "hidden words" not in text
    for line in text.splitlines():  # [ref] role "name" ... @(x,y,w,h)
        assert line.startswith("[") and line.endswith(")") and " @(" in line, line


def test_form_actions(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    steps = [
        f"click_element({ref(obs, 'checkbox', 'I agree')})",
        f'select_element({ref(obs, "combobox", "")}, "Blue")',
        f'type_element({ref(obs, "textbox", "Name")}, "Bob")',
        'key("ctrl+a")',
        'type("Ada Lovelace")',
        'key("Backspace")',
    ]
    for action in steps:
        obs, _, _, _, info = env.step(action)
        assert "action_error" not in info, (action, info)
    assert 'checkbox "I agree" value="checked"' in obs["text"]
    assert 'value="Blue"' in obs["text"]
    assert 'textbox "Name" value="Ada Lovelac" focused' in obs["text"]
    obs, _, _, _, info = env.step(f'select_element({ref(obs, "combobox", "")}, "Green")')
    assert 'has no option \'Green\'; its options are ["Red", "Blue"]' in info["action_error"]
    obs, _, _, _, info = env.step(f'type_element({ref(obs, "button", "Finish")}, "x")')
    assert "does not take text" in info["action_error"]
    obs, _, _, _, info = env.step("wait(9000)")  # would outlast the 5 s operation timeout
    assert "longer than this env allows (4500 ms" in info["action_error"]
    _, reward, terminated, _, _ = env.step(f"click_element({ref(obs, 'button', 'Finish')})")
    assert (reward, terminated) == (0.25, True)  # "Ada Lovelac" is not "Ada"


def test_navigation_away_truncates_then_the_session_plays(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        f"click_element({ref(obs, 'link', 'Leave')})"
    )
    assert (reward, terminated, truncated) == (0.0, False, True), info
    assert "left the task page" in info["farm.truncated_reason"]
    assert info["farm.truncated_reason"].endswith("/other.html")
    assert json.loads(obs["metadata"])["url"].endswith("/other.html")
    solve(env)


def test_remote_urls_are_never_reached(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    obs, _, terminated, truncated, info = env.step(f"click_element({ref(obs, 'button', 'Away')})")
    assert truncated and not terminated, info
    # the request went to the dead proxy: Chromium shows its error page
    assert "chrome-error://" in info["farm.truncated_reason"], info
    solve(env)


def test_hanging_page_truncates_and_the_next_reset_relaunches(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        f"click_element({ref(obs, 'button', 'Hang')})"
    )
    assert (reward, terminated, truncated) == (0.0, False, True), info
    assert f"did not finish within {OP_TIMEOUT_S} s" in info["farm.truncated_reason"]
    assert "error" in json.loads(obs["metadata"])
    solve(env)


def test_popups_are_closed(env: Any) -> None:
    obs, _ = env.reset(seed=0)
    # the popup is closed as soon as it opens and reported in the step that notices it
    _, _, _, truncated, info = env.step(f"click_element({ref(obs, 'button', 'Popup')})")
    _, _, _, truncated2, info2 = env.step("wait(200)")
    assert not truncated and not truncated2
    closed = info.get("popups_closed", []) + info2.get("popups_closed", [])
    assert len(closed) == 1 and closed[0].endswith(("/other.html", "about:blank")), (info, info2)
    solve(env)


def test_loopback_http_pages_load(pages: Path) -> None:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(pages))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    page_env = make_page_env(
        f"http://127.0.0.1:{httpd.server_address[1]}/page.html", **env_kwargs_without_page()
    )
    try:
        obs, _ = page_env.reset(seed=0)
        assert 'heading "Form task"' in obs["text"]
    finally:
        page_env.close()
        httpd.shutdown()
        httpd.server_close()


def test_a_killed_browser_truncates_and_the_next_reset_relaunches(pages: Path) -> None:
    page_env = make_page_env(str(pages / "page.html"), **env_kwargs_without_page())
    try:
        obs, _ = page_env.reset(seed=0)
        pid = page_env.sandbox.browser_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        obs, reward, terminated, truncated, info = page_env.step("click(10, 10)")
        assert (reward, terminated, truncated) == (0.0, False, True), info
        assert info["farm.truncated_reason"].startswith("sandbox: "), info
        obs, _ = page_env.reset(seed=0)
        assert page_env.sandbox.browser_pid != pid
        assert 'heading "Form task"' in obs["text"]
    finally:
        page_env.close()
