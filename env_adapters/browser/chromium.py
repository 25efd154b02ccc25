"""One Chromium per sandbox, driven through Playwright's async API.

:class:`ChromiumSandbox` owns a Playwright driver and one Chromium process,
launched once (:meth:`ChromiumSandbox.launch`). Every episode gets a fresh
browser context (clean cookies, storage and cache) with a fixed viewport and a
single page (:meth:`ChromiumSandbox.open`).

Which Chromium: Debian's, ``$FARM_CHROMIUM`` if set. Headless sandboxes use
its headless build (:data:`HEADLESS_SHELL`, package ``chromium-headless-shell``,
the engine without the browser's windowing layer, as Playwright itself uses for
headless Chromium) when it is installed: a fresh context with a blank page
costs ~100 ms of CPU there against ~370 ms in the full browser
(:data:`CHROMIUM`), 64 ms against 200 ms of wall time. A window needs the full
browser.

Fast resets: opening a context and a page costs 60-200 ms (a new renderer
process; 0.1-0.4 s of CPU), loading a page 50-100 ms more. So once an episode
has started, the sandbox prepares the *next* episode's tab
(:meth:`~ChromiumSandbox.prepare_spare`): a fresh context and page that no
episode has touched. With ``preload`` the spare tab also loads the page (with
``preload`` as its init script), and the next open of the same URL only has to
adopt it (``open`` then returns True and the caller seeds the episode in the
loaded page); without it, the spare tab is blank and the next open loads the
page into it. The spare is prepared in the agent's *thinking time* only: each
stage (context, page, load) starts when no call runs and the idle gap predicted
to remain covers the stage's typical duration (:class:`~env_adapters.browser.idle.IdleGate`;
callers mark their calls with :meth:`~ChromiumSandbox.busy`), so it does not
compete with steps. A client that steps back to back, or thinks for less time
than a stage takes, leaves no room: the next open then runs the spare's
remaining stages itself (the cost of a reset without spares). The previous
episode's context is closed the same way, in idle time; if none came by the next
open, that open starts the close and goes on without waiting for it. Nothing
else may run during an open: it lifts the gate only for the spare's own stages,
which it waits for (a close running alongside the adopted page's first calls
made them 5-6 ms slower each). A spare that failed or does not fit (another
URL) is closed and the open starts from scratch.

Safety and robustness:

* only local pages: every non-loopback http(s)/ws request goes to a dead proxy
  (``127.0.0.1:9``) and fails at once; ``file://``, ``data:`` and loopback
  hosts load directly;
* popups are closed as soon as they open; downloads are refused; JavaScript
  dialogs are dismissed (Playwright's default without a handler);
* crashes: the browser's ``disconnected`` event, the page's ``crash`` event
  and any failed driver call become :class:`~env_adapters.gui.SandboxCrashed`
  (:meth:`ChromiumSandbox.call`), which ends the episode truncated; the env
  then relaunches the browser on its next reset;
* navigation: the first main-frame navigation away from the episode's page
  (ignoring ``#fragment`` changes) is recorded in :attr:`ChromiumSandbox.left_to`;
* :meth:`ChromiumSandbox.close` is bounded in time: it falls back to killing
  the browser's process tree.

Screenshots come from CDP ``Page.captureScreenshot`` (PNG, lossless: exact
pixels) decoded with Pillow into an ``HxWx3`` uint8 array and cropped to the
observed area. On this machine that costs about the same as
``page.screenshot`` (one compositor frame, 16-33 ms) with less variance, and
skips Playwright's per-call style injection; the text caret is hidden with a
style sheet instead (a blinking caret would make observations depend on
timing). After a cross-process navigation detaches the CDP session,
``page.screenshot`` takes over.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import io
import os
import signal
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urldefrag

import numpy as np
import psutil
from PIL import Image

from env_adapters.browser import keystrokes
from env_adapters.browser.idle import IdleGate
from env_adapters.gui import ActionError, SandboxCrashed
from farm.errors import ConfigError, MissingExtraError

try:
    from playwright.async_api import (
        Browser,
        BrowserContext,
        CDPSession,
        Page,
        Playwright,
        async_playwright,
    )
    from playwright.async_api import Error as PlaywrightError
except ImportError as e:  # pragma: no cover - depends on the install
    raise MissingExtraError("playwright", "browser") from e

T = TypeVar("T")

#: Debian's Chromium (package ``chromium``): the full browser, with or without a window.
CHROMIUM = "/usr/bin/chromium"
#: Debian's headless Chromium (package ``chromium-headless-shell``); the binary itself:
#: the ``/usr/bin`` wrapper does not ``exec`` it, which would hide the browser's pid.
HEADLESS_SHELL = "/usr/lib/chromium/chromium-headless-shell"


def default_executable(headless: bool = True) -> str:
    """``$FARM_CHROMIUM`` if set; else :data:`HEADLESS_SHELL` for a headless sandbox
    where it is installed; else :data:`CHROMIUM`."""
    chosen = os.environ.get("FARM_CHROMIUM")
    if chosen:
        return chosen
    if headless and os.path.exists(HEADLESS_SHELL):
        return HEADLESS_SHELL
    return CHROMIUM


#: Flags every sandbox browser is launched with.
LAUNCH_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
#: Requests to other hosts go to this dead proxy (nothing listens on port 9).
_DEAD_PROXY = {"server": "http://127.0.0.1:9", "bypass": "localhost,127.0.0.1,[::1]"}
#: Hides the text caret in screenshots (it blinks, so it would make them time-dependent).
_HIDE_CARET = "*, *::before, *::after { caret-color: transparent !important; }"
_CLOSE_TIMEOUT_S = 5.0
#: background stages start only after the sandbox has been idle this long (s)
SPARE_IDLE_S = 0.02
#: the stages of preparing a spare tab (:class:`~env_adapters.browser.idle.IdleGate`)
SPARE_STAGES = ("context", "page", "load")


def _same_page(a: str, b: str) -> bool:
    if a.startswith("data:") or b.startswith("data:"):  # '#' is data there, not a fragment
        return a == b
    return urldefrag(a)[0] == urldefrag(b)[0]


def clip_url(url: str, limit: int = 200) -> str:
    """``url`` shortened for messages (data: URLs can be long)."""
    return url if len(url) <= limit else url[: limit - 3] + "..."


class ChromiumSandbox:
    """A Chromium process with one page per episode (see module doc).

    Args:
        width, height: the observed area: the top-left ``width x height`` CSS pixels
            of the window (= screenshot pixels).
        window_width, window_height: the browser window (layout viewport); at least
            the observed area (default: the same).
        executable_path: the Chromium binary (default: :func:`default_executable`).
        headless: run without a window (the default; a display is needed otherwise).
        unthrottled_frames: let the compositor draw frames as soon as asked
            (``--disable-frame-rate-limit``) instead of at 60 Hz. A screenshot waits
            for a fresh frame: 5-8 ms then, 15-35 ms at 60 Hz. The price: a page that
            animates without end (CSS animations, ``requestAnimationFrame`` loops) is
            redrawn as fast as the CPU allows (measured: 1.9 CPU cores for one
            spinning square, 0.08 at 60 Hz). For pages that are still between actions.
        extra_args: flags added to :data:`LAUNCH_ARGS`.
    """

    def __init__(
        self,
        *,
        width: int,
        height: int,
        window_width: int | None = None,
        window_height: int | None = None,
        executable_path: str | None = None,
        headless: bool = True,
        unthrottled_frames: bool = False,
        extra_args: tuple[str, ...] = (),
        keep_pages: int = 0,
    ) -> None:
        if width < 1 or height < 1:
            raise ConfigError(f"the observed area must be at least 1x1, got {width}x{height}")
        self.width, self.height = width, height
        self.window_width = max(width, window_width or width)
        self.window_height = max(height, window_height or height)
        self.executable_path = executable_path or default_executable(headless)
        self.headless = headless
        self.extra_args = tuple(extra_args)
        self.unthrottled_frames = unthrottled_frames
        if unthrottled_frames:
            self.extra_args = ("--disable-frame-rate-limit", *self.extra_args)
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self._browser_pid: int | None = None
        self._tab: _Tab | None = None  # the episode's
        self._spare: asyncio.Task[_Tab] | None = None  # the next episode's, being prepared
        #: the last episode's tab and the task that closes it in idle time
        self._retiring: tuple[_Tab, asyncio.Task[None]] | None = None
        self.idle = IdleGate(SPARE_IDLE_S)
        #: how the last open got its tab: "preloaded" (spare with the page loaded),
        #: "spare" (blank spare tab) or "new" (no spare was ready)
        self.last_open = ""
        self._lost: str | None = None
        self.home_url = ""
        #: where the page went when it left :attr:`home_url` (None while it stays)
        self.left_to: str | None = None
        #: URLs of popups closed since the last :meth:`take_events`
        self.popups_closed: list[str] = []
        self._closing: set[asyncio.Future[None]] = set()
        #: intact episode tabs kept by URL for :meth:`resume_page` (most recent last)
        self.keep_pages = keep_pages
        self._parked: collections.OrderedDict[str, _Tab] = collections.OrderedDict()

    # ------------------------------------------------------------ lifecycle

    @property
    def launched(self) -> bool:
        return self._browser is not None

    @property
    def browser_pid(self) -> int | None:
        """The Chromium browser process id (None before launch or if unknown)."""
        return self._browser_pid

    @property
    def _page(self) -> Page | None:
        return None if self._tab is None else self._tab.page

    @property
    def page(self) -> Page:
        if self._tab is None:
            raise SandboxCrashed("no page is open (the episode was not started)")
        return self._tab.page

    async def launch(self) -> None:
        """Start the Playwright driver and Chromium (once per sandbox)."""
        if not os.path.exists(self.executable_path):
            raise SandboxCrashed(f"no Chromium at {self.executable_path} (set $FARM_CHROMIUM)")
        if self._pw is not None or self._browser is not None:  # a launch cut short
            await self.close(force=True)
        self._lost = None
        try:
            self._pw = await async_playwright().start()
            self._browser = await self._pw.chromium.launch(
                executable_path=self.executable_path,
                args=[*LAUNCH_ARGS, *self.extra_args],
                headless=self.headless,
                proxy=_DEAD_PROXY,  # type: ignore[arg-type]
            )
        except PlaywrightError as e:
            await self.close()
            raise SandboxCrashed(f"Chromium did not start: {_first_line(e)}") from None
        self._browser.on("disconnected", lambda _: self._set_lost("the browser disconnected"))
        self._browser_pid = await self._find_browser_pid()

    def cpu_seconds(self) -> float:
        """User + system CPU time of the whole Chromium process tree (browser, renderers,
        GPU and utility processes) so far; 0 before launch."""
        if self._browser_pid is None:
            return 0.0
        try:
            root = psutil.Process(self._browser_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:  # gone
            return 0.0
        total = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.Error):  # a process that just ended
                t = proc.cpu_times()
                total += t.user + t.system
        return total

    async def _find_browser_pid(self) -> int | None:
        """The browser process id (for a hard kill if closing hangs)."""
        assert self._browser is not None
        with contextlib.suppress(PlaywrightError, KeyError, StopIteration):
            cdp = await self._browser.new_browser_cdp_session()
            info = await cdp.send("SystemInfo.getProcessInfo")
            await cdp.detach()
            return next(int(p["id"]) for p in info["processInfo"] if p["type"] == "browser")
        return None

    async def open(
        self,
        url: str,
        *,
        init_script: str | None = None,
        timeout_s: float,
        preload: str | None = None,
    ) -> bool:
        """Open ``url`` in a fresh context; the previous episode's context is closed in
        the background (idle time, like the spare; at most one at a time).

        ``init_script`` runs in the page before its own scripts. With ``preload``
        (an init script too), the page may instead come from a spare tab that
        loaded ``url`` ahead of time with ``preload`` as its init script (see
        :meth:`prepare_spare`): then ``init_script`` has *not* run and the call
        returns True.
        """
        if self._browser is None:
            raise SandboxCrashed("the browser is not running")
        self.check()
        self._expedite_retiring()
        self._park_current()
        self.left_to = None
        self.popups_closed = []
        self.home_url = ""  # no departures while the page loads
        tab = await self._take_spare(url if preload is not None else None, timeout_s)
        preloaded = tab is not None and tab.loaded == url
        self.last_open = "preloaded" if preloaded else "new" if tab is None else "spare"
        try:
            if tab is None:
                tab = await self._new_tab(timeout_s)
            self._adopt(tab)
            if not preloaded:
                if init_script:
                    await self.call(tab.context.add_init_script(init_script))
                await self._load(tab, url, timeout_s)
        except SandboxCrashed:
            await self._close_tab()
            raise
        self.home_url = tab.page.url  # as the browser spells it (data: URLs get re-encoded)
        return preloaded

    def can_restart(self, url: str) -> bool:
        """Whether the episode's tab still shows ``url`` (loaded, not crashed, never left),
        so a page task may start its next episode on it in place."""
        tab = self._tab
        return (
            tab is not None
            and self._lost is None
            and self.left_to is None
            and not tab.crashed
            and tab.loaded == url
            and not tab.page.is_closed()
        )

    def restarted(self) -> None:
        """The next episode runs on the current tab (:meth:`can_restart`)."""
        self.last_open = "reused"
        self.popups_closed = []

    def resume_page(self, url: str) -> bool:
        """Make a kept tab that shows ``url`` the episode's tab (the current one is kept in
        its place, if intact); False if none is kept. Then :meth:`can_restart` holds."""
        tab = self._parked.pop(url, None)
        if tab is None:
            return False
        if tab.crashed or tab.page.is_closed() or not _same_page(tab.page.url, tab.home):
            self._closing_task(_close_context(tab.context))
            return False
        self._park_current()
        self._tab = tab
        self.left_to = None
        self.home_url = tab.home
        self.restarted()
        return True

    def _park_current(self) -> None:
        """Keep the episode's tab for a later :meth:`resume_page` if it is intact, else
        close it in idle time; the least recently used kept tab beyond ``keep_pages`` closes."""
        tab = self._tab
        if tab is None:
            return
        if self.keep_pages <= 0 or tab.loaded is None or not self.can_restart(tab.loaded):
            self._retire_tab()
            return
        self._tab = None
        old = self._parked.pop(tab.loaded, None)
        if old is not None:
            self._closing_task(_close_context(old.context))
        self._parked[tab.loaded] = tab
        while len(self._parked) > self.keep_pages:
            _, evicted = self._parked.popitem(last=False)
            self._closing_task(_close_context(evicted.context))

    def _closing_task(self, coro: Any) -> None:
        """Keep a close (a coroutine, or a task already running it) until it is done."""
        fut = asyncio.ensure_future(coro)
        self._closing.add(fut)
        fut.add_done_callback(self._closing.discard)

    def prepare_spare(self, url: str, *, timeout_s: float, preload: str | None = None) -> None:
        """Start preparing the next episode's tab in the background (see :meth:`open`).

        Call it when the episode has started: the work (a context, a page, the
        load) then overlaps the episode instead of delaying its first observation.
        """
        if self._browser is None or self._spare is not None:
            return
        self._spare = asyncio.ensure_future(self._prepare_spare(url, preload, timeout_s))

    async def _new_tab(self, timeout_s: float, *, gate: bool = False) -> _Tab:
        """A fresh context with one blank page and a CDP session on it.

        ``gate``: wait for idle time before each stage (a spare being prepared).
        """
        assert self._browser is not None
        if gate:
            await self.idle.wait("context")
        with self.idle.timed("context"):
            context = await self.call(
                self._browser.new_context(
                    viewport={"width": self.window_width, "height": self.window_height},
                    device_scale_factor=1,
                    accept_downloads=False,
                    service_workers="block",
                )
            )
        tab = _Tab(context)
        try:
            context.set_default_timeout(timeout_s * 1000)
            context.on("page", lambda page: self._on_popup(tab, page))
            if gate:
                await self.idle.wait("page")
            with self.idle.timed("page"):
                tab.page = await self.call(context.new_page())
                tab.page.on("crash", lambda _: self._on_crash(tab))
                tab.page.on("framenavigated", lambda frame: self._on_navigated(tab, frame))
                tab.cdp = await self.call(context.new_cdp_session(tab.page))
        except BaseException:
            await _close_context(context)
            raise
        return tab

    async def _load(self, tab: _Tab, url: str, timeout_s: float) -> None:
        try:
            with self.idle.timed("load"):
                await self.call(tab.page.goto(url, wait_until="load", timeout=timeout_s * 1000))
        except SandboxCrashed as e:
            raise SandboxCrashed(f"cannot load {clip_url(url)}: {e}") from None
        await self.call(tab.page.add_style_tag(content=_HIDE_CARET))
        tab.loaded, tab.home = url, tab.page.url

    async def _prepare_spare(self, url: str, preload: str | None, timeout_s: float) -> _Tab:
        tab = await self._new_tab(timeout_s, gate=True)
        try:
            if preload is not None:
                await self.idle.wait("load")
                await self.call(tab.context.add_init_script(preload))
                await self._load(tab, url, timeout_s)
        except BaseException:
            await _close_context(tab.context)
            raise
        return tab

    async def _take_spare(self, url: str | None, timeout_s: float) -> _Tab | None:
        """The prepared tab if it is usable for ``url`` (None: a blank one), else None."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        try:
            with self.idle.hurry(*SPARE_STAGES):  # its remaining stages run now
                tab = await asyncio.wait_for(asyncio.shield(spare), timeout_s)
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - a failed spare is no loss
            await _discard(spare)
            self.check()  # but a dead browser is
            return None
        if tab.crashed or tab.page.is_closed() or (tab.loaded is not None and tab.loaded != url):
            await _close_context(tab.context)
            return None
        if tab.page.url != tab.home:  # it navigated while it waited
            await _close_context(tab.context)
            return None
        return tab

    def busy(self) -> contextlib.AbstractContextManager[None]:
        """Mark a call (a reset, a step) in progress: no background stage starts meanwhile."""
        return self.idle.busy()

    def _adopt(self, tab: _Tab) -> None:
        self._tab = tab
        if tab.crashed:
            self._set_lost("the page crashed")

    async def _close_tab(self) -> None:
        tab, self._tab = self._tab, None
        if tab is not None:
            await _close_context(tab.context)

    def _retire_tab(self) -> None:
        """Close the episode's tab in the sandbox's idle time (see :meth:`open`)."""
        tab, self._tab = self._tab, None
        if tab is not None:
            self._retiring = (tab, asyncio.ensure_future(self._close_when_idle(tab)))

    async def _close_when_idle(self, tab: _Tab) -> None:
        await self.idle.wait("close")
        tab.closing = True
        with self.idle.timed("close"):
            await _close_context(tab.context)

    def _expedite_retiring(self) -> None:
        """The previous episode's tab is still waiting for idle time to close in (the
        client calls back to back): close it now, alongside the call that opens the next
        one, rather than hold that call up for it."""
        retiring, self._retiring = self._retiring, None
        if retiring is None or retiring[1].done():
            return
        tab, task = retiring
        if tab.closing:  # closing already: let it finish in the background
            self._closing_task(task)
            return
        task.cancel()
        self._closing_task(_close_context(tab.context))

    async def _finish_retiring(self) -> None:
        """Close the previous episode's tab now and wait for it (bounded)."""
        retiring, self._retiring = self._retiring, None
        if retiring is None:
            return
        _, task = retiring
        if not task.done():
            try:
                with self.idle.hurry("close"):
                    await asyncio.wait_for(asyncio.shield(task), _CLOSE_TIMEOUT_S)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - bounded, never fails
                task.cancel()

    async def close(self, *, force: bool = False) -> None:
        """Close everything; bounded in time, never raises.

        ``force`` (after a crash or a hang) kills the browser's processes at once
        instead of closing the page and the browser gracefully.
        """
        spare, self._spare = self._spare, None
        if force and self._browser_pid is not None:
            _kill_tree(self._browser_pid)
            self._browser_pid = None
            self._tab = None
        if spare is not None:
            await _discard(spare)
        await self._finish_retiring()
        await self._close_tab()
        parked, self._parked = list(self._parked.values()), collections.OrderedDict()
        for tab in parked:
            if not force:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(_close_context(tab.context), _CLOSE_TIMEOUT_S)
        browser, self._browser = self._browser, None
        if browser is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), _CLOSE_TIMEOUT_S)
        pw, self._pw = self._pw, None
        if pw is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pw.stop(), _CLOSE_TIMEOUT_S)
        if self._browser_pid is not None:
            _kill_tree(self._browser_pid)
            self._browser_pid = None

    # ------------------------------------------------------------ health

    def _set_lost(self, why: str) -> None:
        if self._lost is None:
            self._lost = why

    @property
    def lost(self) -> str | None:
        """Why the sandbox is unusable (crash, disconnect), or None."""
        return self._lost

    def check(self) -> None:
        """Raise :class:`SandboxCrashed` if the browser or the page is gone."""
        if self._lost is not None:
            raise SandboxCrashed(self._lost)
        if self._browser is not None and not self._browser.is_connected():
            self._set_lost("the browser disconnected")
            raise SandboxCrashed("the browser disconnected")

    async def call(self, awaitable: Awaitable[T], *, action_errors: tuple[str, ...] = ()) -> T:
        """Await a Playwright call; failures of the sandbox become SandboxCrashed.

        Errors whose message contains one of ``action_errors`` (an unknown key
        name, say) are the action's fault: they become :class:`ActionError`.
        Errors caused by the page navigating away (the execution context was
        destroyed) become :class:`NavigationError`, so callers can tell them
        from crashes.
        """
        try:
            return await awaitable
        except PlaywrightError as e:
            self.check()
            message = _first_line(e)
            if any(part in message for part in action_errors):
                raise ActionError(message) from None
            if self.left_to is not None or _is_navigation_error(message):
                if self.left_to is None and self._page is not None:
                    self._note_departure(self._page.url)
                raise NavigationError(message) from None
            raise SandboxCrashed(f"the browser failed: {message}") from None

    async def type_text(self, text: str) -> None:
        """Type ``text`` into the focused element: the key events of Playwright's
        ``keyboard.type``, pipelined (see :mod:`env_adapters.browser.keystrokes`)."""
        tab = self._tab
        if tab is None:
            raise SandboxCrashed("no page is open (the episode was not started)")
        if tab.cdp is None:  # detached by a cross-process navigation: Playwright's own
            await self.call(tab.page.keyboard.type(text))
            return
        await self.call(keystrokes.send_pipelined(tab.cdp.send, keystrokes.type_events(text)))

    # ------------------------------------------------------------ events

    def _on_crash(self, tab: _Tab) -> None:
        tab.crashed = True
        if tab is self._tab:
            self._set_lost("the page crashed")

    def _on_navigated(self, tab: _Tab, frame: Any) -> None:
        if tab is self._tab and frame == tab.page.main_frame:
            self._note_departure(frame.url)

    def check_navigation(self) -> str | None:
        """Compare the page's current URL with the task page; returns :attr:`left_to`."""
        if self._page is not None:
            self._note_departure(self._page.url)
        return self.left_to

    def _note_departure(self, url: str) -> None:
        if self.left_to is None and self.home_url and not _same_page(url, self.home_url):
            self.left_to = clip_url(url)

    def _on_popup(self, tab: _Tab, page: Page) -> None:
        if tab.page is None or page is tab.page:  # the tab's own page, being opened
            return
        if tab is self._tab:
            self.popups_closed.append(page.url or "about:blank")
        task = asyncio.ensure_future(_close_quietly(page))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def take_events(self) -> dict[str, Any]:
        """Events since the last call, for step info (popups closed)."""
        events: dict[str, Any] = {}
        if self.popups_closed:
            events["popups_closed"] = self.popups_closed
            self.popups_closed = []
        return events

    # ------------------------------------------------------------ observation

    async def screenshot(self) -> np.ndarray:
        """The observed area as an ``(height, width, 3)`` uint8 array (exact pixels)."""
        tab = self._tab
        if tab is None:
            raise SandboxCrashed("no page is open (the episode was not started)")
        png: bytes | None = None
        if tab.cdp is not None:
            try:
                shot = await tab.cdp.send(
                    "Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}
                )
                png = base64.b64decode(shot["data"])
            except PlaywrightError:
                # a cross-process navigation (to another page or an error page) detaches
                # the CDP session: use Playwright's screenshot, which follows the page
                self.check()
                tab.cdp = None
        if png is None:
            png = await self.call(tab.page.screenshot(type="png", caret="hide", animations="allow"))
        with Image.open(io.BytesIO(png)) as img:
            pixels = np.asarray(img.convert("RGB"))
        pixels = pixels[: self.height, : self.width]
        if pixels.shape != (self.height, self.width, 3):  # a window smaller than asked for
            canvas = np.zeros((self.height, self.width, 3), np.uint8)
            canvas[: pixels.shape[0], : pixels.shape[1]] = pixels
            pixels = canvas
        return np.array(pixels)  # a fresh, writable, C-contiguous copy


class _Tab:
    """A browser context with its one page (an episode's, or the spare)."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.page: Page = None  # type: ignore[assignment]  # set right after creation
        self.cdp: CDPSession | None = None
        self.loaded: str | None = None  # the URL loaded into it, if any
        self.home = "about:blank"  # its page's URL after loading (as the browser spells it)
        self.crashed = False
        self.closing = False  # its context is being closed (it was retired)


async def _close_context(context: BrowserContext) -> None:
    with contextlib.suppress(Exception):  # closing must not fail
        await asyncio.wait_for(context.close(), _CLOSE_TIMEOUT_S)


async def _discard(spare: asyncio.Task[_Tab]) -> None:
    """Cancel a spare tab being prepared, or close the one it prepared."""
    if not spare.done():
        spare.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(spare), _CLOSE_TIMEOUT_S)
    if spare.done() and not spare.cancelled() and spare.exception() is None:
        await _close_context(spare.result().context)


class NavigationError(SandboxCrashed):
    """A page call failed because the page navigated away (not a crash)."""


async def _close_quietly(page: Page) -> None:
    with contextlib.suppress(PlaywrightError, TimeoutError):
        await asyncio.wait_for(page.close(), _CLOSE_TIMEOUT_S)


def _is_navigation_error(message: str) -> bool:
    return "Execution context was destroyed" in message or "navigat" in message.lower()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants, if still alive."""
    try:
        proc = psutil.Process(pid)
        if "chrom" not in proc.name().lower():  # exited, and the pid was reused
            return
        procs = [*proc.children(recursive=True), proc]
    except psutil.Error:  # gone already
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
