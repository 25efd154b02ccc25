"""Pipelined typing fires exactly the DOM events of Playwright's ``keyboard.type``.

A page logs every keyboard and input event (type, key, code, keyCode, which,
charCode, inputType, data, the field's value after it); the same text is typed
once with ``page.keyboard.type`` and once with ``ChromiumSandbox.type_text``
(:mod:`env_adapters.browser.keystrokes`), and the two logs must be identical. Real Chromium.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"needs Chromium at {CHROMIUM}"),
]

pytest.importorskip("playwright.async_api", reason="needs playwright (pip install farm[browser])")

from env_adapters.browser.chromium import ChromiumSandbox  # noqa: E402
from env_adapters.browser.keystrokes import LAYOUT, type_events  # noqa: E402

PAGE = """<!DOCTYPE html><html><body>
<textarea id="t" style="width:300px;height:100px"></textarea>
<script>
window.log = [];
const t = document.getElementById('t');
for (const kind of ['keydown', 'keypress', 'beforeinput', 'input', 'keyup']) {
  t.addEventListener(kind, (e) => window.log.push([e.type, e.key ?? null, e.code ?? null,
    e.keyCode ?? null, e.which ?? null, e.charCode ?? null, e.inputType ?? null,
    e.data ?? null, e.shiftKey ?? null, e.repeat ?? null, t.value]));
}
t.focus();
</script></body></html>"""
TEXT = "Hello, World! 0123456789 `~-_=+[{]}\\\\|;:'\",<.>/? tab\there\nline two é€ 😀 end\r"


async def _events(sandbox: ChromiumSandbox, url: str, pipelined: bool) -> list[list[object]]:
    await sandbox.open(url, timeout_s=20)
    if pipelined:
        await sandbox.type_text(TEXT)
    else:
        await sandbox.page.keyboard.type(TEXT)
    return await sandbox.page.evaluate("() => window.log")


def test_pipelined_typing_fires_the_same_events_as_playwright(tmp_path: Path) -> None:
    page = tmp_path / "keys.html"
    page.write_text(PAGE)

    async def main() -> tuple[list[list[object]], list[list[object]]]:
        sandbox = ChromiumSandbox(width=320, height=200)
        await sandbox.launch()
        try:
            theirs = await _events(sandbox, page.as_uri(), pipelined=False)
            ours = await _events(sandbox, page.as_uri(), pipelined=True)
        finally:
            await sandbox.close()
        return theirs, ours

    theirs, ours = asyncio.run(main())
    assert len(theirs) > 4 * len(TEXT) // 2
    assert ours == theirs
    assert ours[-1][-1] == TEXT.replace("\r", "\n")  # the textarea's value at the end


def test_the_layout_types_every_printable_ascii_character() -> None:
    printable = [chr(c) for c in range(32, 127)]
    assert set(printable) <= set(LAYOUT)
    commands = list(type_events("a\n\té"))
    assert [m for m, _ in commands] == [
        "Input.dispatchKeyEvent",
        "Input.dispatchKeyEvent",  # a: down, up
        "Input.dispatchKeyEvent",
        "Input.dispatchKeyEvent",  # \n: Enter down (text \r), up
        "Input.insertText",  # \t: not a layout character
        "Input.insertText",  # é
    ]
    assert commands[2][1]["key"] == "Enter" and commands[2][1]["text"] == "\r"
