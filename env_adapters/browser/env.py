"""``BrowserEnv``: the shared GUI interface over one Chromium (see :mod:`env_adapters.gui`).

A :class:`BrowserEnv` runs one :class:`~env_adapters.gui.TaskSpec` of kind
``"browser"``: ``setup["page"]`` is the local page to open (``file://``,
``data:`` or a loopback ``http://`` URL), ``setup.get("exclude")`` an optional
CSS selector of elements the text view leaves out. What an episode *means*
(its instruction, reward and end) is a :class:`PageTask`, chosen by
``evaluator["name"]``: ``"js"`` (JavaScript expressions for reward and done,
see :class:`ScriptedPage`) or ``"miniwob"`` (:mod:`env_adapters.browser.miniwob`).

The agent observes the top-left ``width x height`` pixels of a browser window
of ``window_width x window_height`` (by default the same size): the
screenshot, the text view and every coordinate refer to that area.

Per episode: a fresh browser context (clean storage), the page loaded with
``Math.random`` seeded from the episode seed before the page's own scripts run
(so pages that draw random numbers at load time are deterministic too), then
the page task starts the episode. The context (and, for page tasks that seed
themselves at start such as MiniWoB++, the loaded page) is prepared in the
previous episode's idle time (see :mod:`env_adapters.browser.chromium`);
``info["browser_context"]`` of a reset says whether it was (``"preloaded"``,
``"spare"``) or not (``"new"``). Per step: the action is performed with
Playwright's mouse and keyboard, then the page task evaluates while the
observation, the screenshot plus the text view
(:mod:`env_adapters.browser.dom`), is taken.

Actions (text form in :mod:`env_adapters.gui.actions`):

* ``click``/``double_click``/``right_click``/``move``/``drag``/``scroll``
  (mouse wheel at a point) take screenshot pixels; a point outside the
  observed area is refused (no-op step, ``info["action_error"]`` names its size);
* ``type(text)`` types into the focused element, key events per character.
  Typing costs ~1.5 ms per character in Chromium, so texts longer than
  ``max_type_chars`` (default 2,000, ~3 s) are refused with an error naming
  the limit (a megabyte would otherwise outlast any timeout);
* ``key(combo)`` presses a combo (:func:`env_adapters.gui.keys.parse_combo`);
* ``click_element(ref)`` scrolls the element into view if no part of it is
  in the observed area and clicks the center of its visible part with the
  mouse; ``type_element(ref, text)`` clicks it, selects
  its content and types ``text`` (replacing the content);
  ``select_element(ref, value)`` chooses the option of a ``<select>`` whose
  text (or value) is ``value``. An unknown ref, an element that is hidden,
  covered by another element, or of the wrong kind is refused with an error
  that says so (and lists the refs of the text view);
* ``wait(ms)`` sleeps (refused if it would outlast ``op_timeout_s``).

Navigation: if the page leaves the task page (a link, a form submission, a
script assigning ``location``), the step ends the episode **truncated** with
``info["farm.truncated_reason"]`` naming the new URL (the task cannot be
evaluated any more, but nothing crashed: the next reset only opens a new
context). Popups are closed (``info["popups_closed"]`` of the step that
notices them); JavaScript dialogs are dismissed; downloads are refused; only
local URLs load (see :mod:`env_adapters.browser.chromium`). A page that hangs
(a busy JavaScript loop) makes the step exceed ``op_timeout_s``; the episode
is truncated and the next reset relaunches the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np

from env_adapters.browser import dom
from env_adapters.browser.chromium import (
    ChromiumSandbox,
    NavigationError,
    clip_url,
)
from env_adapters.gui import SandboxCrashed
from env_adapters.gui import actions as A
from env_adapters.gui.env import TRUNCATED_REASON, GuiEnv, both
from env_adapters.gui.keys import parse_combo
from env_adapters.gui.tasks import TaskSpec
from farm.errors import ConfigError

#: default refusal threshold of ``type()`` / ``type_element()`` (see module doc)
MAX_TYPE_CHARS = 2_000
#: an observation that takes longer is looked at again, in case a navigation stalled it (s)
NAVIGATION_GRACE_S = 2.0
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
_TEXT_INPUT_TYPES = {
    "",
    "text",
    "password",
    "email",
    "search",
    "tel",
    "url",
    "number",
    "date",
    "time",
    "datetime-local",
    "month",
    "week",
}
#: resolves once the scroll positions of the page and of the elements under point
#: (x, y) have not changed for 3 frames (smooth scrolling), after at most 30 frames
_SETTLE_JS = """([x, y]) => new Promise((resolve) => {
  const chain = [];
  for (let el = document.elementFromPoint(x, y); el; el = el.parentElement) chain.push(el);
  const pos = () => window.scrollX + ',' + window.scrollY + ',' +
    chain.map((el) => el.scrollLeft + ',' + el.scrollTop).join(',');
  let last = pos(), calm = 0, frames = 0;
  const tick = () => {
    const now = pos();
    calm = now === last ? calm + 1 : 0;
    last = now;
    if (calm >= 3 || ++frames > 30) resolve(frames); else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})"""


def seeded_random_js(seed: int) -> str:
    """An init script that makes ``Math.random`` a PRNG (mulberry32) seeded with ``seed``."""
    return (
        f"(() => {{ let a = {seed % (1 << 32)} >>> 0; Math.random = function () {{ "
        "a = (a + 0x6D2B79F5) | 0; let t = Math.imul(a ^ (a >>> 15), 1 | a); "
        "t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; "
        "return ((t ^ (t >>> 14)) >>> 0) / 4294967296; }; })();"
    )


class PageTask(Protocol):
    """What an episode on a page means: instruction, reward, end (see module doc).

    ``preload``: True if an episode may start on a page loaded before its seed
    was known (the page draws no seed-dependent randomness while loading, or
    :meth:`start` re-seeds it, as MiniWoB++ does); the sandbox then keeps the
    next episode's page loaded in a spare context, so reset skips the load.
    """

    preload: bool
    #: True if :meth:`start` may also start an episode on the page of the previous one
    #: (it resets the page's task state itself, as MiniWoB++'s ``core.startEpisodeReal``)
    restartable: bool = False
    #: True if :meth:`start` seeds the page's ``Math.random`` itself before the episode
    #: draws from it (MiniWoB++'s ``Math.seedrandom(seed)``); otherwise an episode that
    #: starts on a page loaded earlier is re-seeded by the env first (one more call)
    seeds_itself: bool = False

    async def start(self, sandbox: ChromiumSandbox, seed: int, options: dict[str, Any]) -> str:
        """Start the episode on the freshly loaded page; return its instruction."""
        ...

    async def before_action(self, sandbox: ChromiumSandbox) -> str | None:
        """None to perform the next action, or why not (the episode already ended)."""
        ...

    async def evaluate(self, sandbox: ChromiumSandbox) -> tuple[float, bool, dict[str, Any]]:
        """Reward of this step, whether the task ended, and info."""
        ...


class ScriptedPage:
    """A page task from JavaScript expressions (``evaluator={"name": "js", ...}``).

    ``evaluator["reward"]`` (a number) and ``evaluator["done"]`` (a boolean) are
    evaluated in the page after every action; both are optional (reward 0,
    never done). The instruction is the task's ``instruction``,
    ``setup["instruction"]`` or the page title. ``setup["preload"]: true`` lets
    the next episode's page load ahead of time (with ``Math.random`` seeded 0,
    re-seeded with the episode seed when the episode starts): only for pages
    whose load does not depend on the seed.
    """

    def __init__(self, task: TaskSpec) -> None:
        self.task = task
        self.reward_js = task.evaluator.get("reward")
        self.done_js = task.evaluator.get("done")
        self.preload = bool(task.setup.get("preload", False))

    async def start(self, sandbox: ChromiumSandbox, seed: int, options: dict[str, Any]) -> str:
        if self.task.instruction is not None:
            return self.task.instruction
        if "instruction" in self.task.setup:
            return str(self.task.setup["instruction"])
        return await sandbox.call(sandbox.page.title())

    async def before_action(self, sandbox: ChromiumSandbox) -> str | None:
        return None

    async def evaluate(self, sandbox: ChromiumSandbox) -> tuple[float, bool, dict[str, Any]]:
        if self.reward_js is None and self.done_js is None:
            return 0.0, False, {}
        script = f"() => [Number({self.reward_js or '0'}), Boolean({self.done_js or 'false'})]"
        reward, done = await sandbox.call(sandbox.page.evaluate(script))
        return float(reward or 0.0), bool(done), {}


PageTaskFactory = Callable[[TaskSpec], PageTask]
_PAGE_TASKS: dict[str, PageTaskFactory] = {"js": ScriptedPage, "none": ScriptedPage}
#: evaluators whose module registers them when first needed
_PAGE_TASK_MODULES = {"miniwob": "env_adapters.browser.miniwob"}


def register_page_task(name: str, factory: PageTaskFactory) -> None:
    """Make ``evaluator={"name": name}`` tasks run with ``factory(task)``."""
    _PAGE_TASKS[name] = factory


def page_task_for(task: TaskSpec) -> PageTask:
    """The page task named by ``task.evaluator["name"]`` (default ``"js"``)."""
    name = str(task.evaluator.get("name", "js"))
    if name not in _PAGE_TASKS and name in _PAGE_TASK_MODULES:
        importlib.import_module(_PAGE_TASK_MODULES[name])
    if name not in _PAGE_TASKS:
        raise ConfigError(
            f"task {task.id}: unknown browser evaluator {name!r}; known: {sorted(_PAGE_TASKS)}"
        )
    return _PAGE_TASKS[name](task)


def local_url(page: str) -> str:
    """``page`` as a URL a sandbox may open: a file path, ``file:``, ``data:``,
    ``about:`` or loopback ``http(s)``; anything else raises ConfigError."""
    parsed = urlparse(page)
    if parsed.scheme == "" or parsed.scheme == "file":
        path = Path(url2pathname(parsed.path)) if parsed.scheme == "file" else Path(page)
        if not path.resolve().is_file():
            raise ConfigError(f"no page at {path}")
        return page if parsed.scheme == "file" else path.resolve().as_uri()
    if parsed.scheme in ("data", "about"):
        return page
    if parsed.scheme in ("http", "https") and (parsed.hostname or "") in _LOCAL_HOSTS:
        return page
    raise ConfigError(
        f"browser sandboxes open only local pages (file, data, loopback), got {page!r}"
    )


class BrowserEnv(GuiEnv):
    """A GUI env over one Chromium; see the module doc.

    Args:
        task: a ``kind="browser"`` task spec.
        width, height: the observed area (screenshot size) in pixels: the top-left
            ``width x height`` of the browser window; clicks must fall inside it.
        window_width, window_height: the browser window (layout viewport), at least
            the observed area (default: the same). A larger window lets a page lay
            itself out as in a desktop browser while the agent sees a fixed region.
        action_format: ``"text"`` or ``"structured"`` (see :mod:`env_adapters.gui.spaces`).
        op_timeout_s: bound of every sandbox operation (a hung page ends the episode).
        max_type_chars: longest text ``type``/``type_element`` accept.
        page_task: the episode logic (default: from ``task.evaluator``).
        executable_path: Chromium binary (default: `chromium.default_executable`);
            headless: run without a window.
        spare_contexts: prepare the next episode's context (and page) in the
            sandbox's idle time (see :mod:`env_adapters.browser.chromium`); off: each
            reset opens and loads its context itself.
        unthrottled_frames: draw frames on demand rather than at 60 Hz (a screenshot
            then waits 5-15 ms for its frame instead of 15-35 ms; see
            :class:`~env_adapters.browser.chromium.ChromiumSandbox`). It costs CPU only
            on pages that animate without end, so the default (None) is the task's
            ``setup["still"]``: on for tasks declared still, off otherwise.
        reuse_page: start an episode of the same task on the page of the previous one
            when its page task is ``restartable`` and the page is intact (as the
            ``miniwob`` package does: one page load per browser, then
            ``core.startEpisodeReal()`` per episode), instead of a fresh context
            (``info["browser_context"] == "reused"``). Much cheaper (no renderer
            process, no load) but episodes share the page's JavaScript heap; off by
            default. The sandbox then also keeps the pages of up to ``keep_pages``
            other tasks open, so a suite that switches tasks resumes them in place.
        keep_pages: see ``reuse_page``.
    """

    #: the page task's state and the observation are read concurrently (one renderer
    #: round trip and the screenshot's frame wait overlap)
    observe_while_evaluating = True

    def __init__(
        self,
        task: TaskSpec,
        *,
        width: int = 1280,
        height: int = 720,
        window_width: int | None = None,
        window_height: int | None = None,
        action_format: str = "text",
        op_timeout_s: float = 20.0,
        max_type_chars: int = MAX_TYPE_CHARS,
        page_task: PageTask | None = None,
        executable_path: str | None = None,
        headless: bool = True,
        unthrottled_frames: bool | None = None,
        spare_contexts: bool = True,
        reuse_page: bool = False,
        keep_pages: int = 8,
    ) -> None:
        super().__init__(
            task,
            width=width,
            height=height,
            action_format=action_format,
            op_timeout_s=op_timeout_s,
        )
        self.set_task(task, page_task)
        self.max_type_chars = max_type_chars
        self.spare_contexts = spare_contexts
        self.reuse_page = reuse_page
        self.sandbox = ChromiumSandbox(
            width=width,
            height=height,
            window_width=window_width,
            window_height=window_height,
            executable_path=executable_path,
            headless=headless,
            unthrottled_frames=(
                bool(task.setup.get("still", False))
                if unthrottled_frames is None
                else unthrottled_frames
            ),
            keep_pages=keep_pages if reuse_page else 0,
        )
        self._refs: tuple[int, ...] = ()
        self._notes: dict[str, Any] = {}

    def set_task(self, task: TaskSpec, page_task: PageTask | None = None) -> None:
        """Run ``task`` (with ``page_task``, default: from its evaluator) from the next
        reset on; for suites that choose the task per episode. Call it between episodes
        only. The spare context keeps the page it was prepared for, so the first
        episode of a different page opens a new context (``browser_context: "new"``)."""
        if task.kind != "browser":
            raise ConfigError(f"BrowserEnv runs browser tasks, {task.id} is a {task.kind} task")
        if "page" not in task.setup:
            raise ConfigError(f"task {task.id}: setup needs a 'page' to open")
        url = local_url(str(task.setup["page"]))
        self.page_task = page_task if page_task is not None else page_task_for(task)
        self.task, self.url = task, url
        self.exclude = str(task.setup.get("exclude", ""))

    # ------------------------------------------------------------ GuiEnv hooks

    async def _launch(self) -> None:
        await self.sandbox.launch()

    async def _shutdown(self) -> None:
        await self.sandbox.close(force=self._crashed is not None)

    async def aclose(self) -> None:
        await super().aclose()
        await self.sandbox.close()  # also a browser whose launch was cut short (no-op else)

    def _restartable(self) -> bool:
        return self.reuse_page and bool(getattr(self.page_task, "restartable", False))

    async def _start_episode(self, seed: int | None, options: dict[str, Any]) -> str:
        page_seed = int(seed) if seed is not None else int(self.np_random.integers(1 << 31))
        if self._restartable() and (
            self.sandbox.can_restart(self.url) or self.sandbox.resume_page(self.url)
        ):
            self.sandbox.restarted()
            await self._reseed(page_seed)
            self._refs = ()
            self._notes = {}
            return await self.page_task.start(self.sandbox, page_seed, options)
        preloaded = await self.sandbox.open(
            self.url,
            init_script=seeded_random_js(page_seed),
            timeout_s=self.op_timeout_s,
            preload=self._preload_script(),
        )
        if preloaded:  # loaded ahead of time with seed 0
            await self._reseed(page_seed)
        self._refs = ()
        self._notes = {}
        return await self.page_task.start(self.sandbox, page_seed, options)

    async def _reseed(self, page_seed: int) -> None:
        """Seed ``Math.random`` of a page loaded before the seed was known, unless the
        page task's start does it anyway."""
        if not getattr(self.page_task, "seeds_itself", False):
            await self.sandbox.call(self.sandbox.page.evaluate(seeded_random_js(page_seed)))

    async def _perform(self, action: A.Action) -> None:
        self.sandbox.check()
        if self.sandbox.left_to is not None:
            raise A.ActionError(f"the page left the task page (now at {self.sandbox.left_to})")
        try:
            skip = await self.page_task.before_action(self.sandbox)
        except NavigationError:
            return
        if skip is not None:
            self._notes["action_skipped"] = skip
            return
        with contextlib.suppress(NavigationError):  # the page left; astep reports it
            await self._act(action)

    async def _evaluate(self) -> tuple[float, bool, dict[str, Any]]:
        info: dict[str, Any] = {}
        if self.sandbox.left_to is None:
            try:
                reward, done, info = await self.page_task.evaluate(self.sandbox)
            except NavigationError:
                reward, done = 0.0, False
        else:
            reward, done = 0.0, False
        info = {**info, **self._notes, **self.sandbox.take_events()}
        self._notes = {}
        return reward, done, info

    async def _observe(self) -> tuple[np.ndarray, str, dict[str, Any]]:
        self.sandbox.check()
        if self.sandbox.left_to is not None:
            return await self._observe_elsewhere(self.sandbox.left_to)
        # a navigation that had not committed yet when the observation began makes the
        # page refuse calls, or stalls the capture, for a moment: let it load, look again
        grace_s = min(NAVIGATION_GRACE_S, self.op_timeout_s / 3)
        try:
            view, pixels = await asyncio.wait_for(self._view_and_pixels(), grace_s)
        except (SandboxCrashed, TimeoutError):
            self.sandbox.check()
            await self._wait_loaded()
            if self.sandbox.check_navigation() is not None:
                return await self._observe_elsewhere(self.sandbox.left_to or "")
            view, pixels = await self._view_and_pixels()
        self._refs = view.refs
        meta = {"url": clip_url(self.sandbox.page.url), "title": clip_url(view.title)}
        return pixels, view.text, meta

    async def _view_and_pixels(self) -> tuple[dom.TextView, np.ndarray]:
        """The text view and the screenshot, taken concurrently (the screenshot waits for a
        compositor frame anyway); if one fails the other is cancelled."""
        return await both(self._text_view(), self.sandbox.screenshot())

    async def _observe_elsewhere(self, left_to: str) -> tuple[np.ndarray, str, dict[str, Any]]:
        """Best-effort observation of the page the task page left for (the episode ends)."""
        meta: dict[str, Any] = {"url": left_to, "left_task_page": left_to}
        view, pixels = dom.TextView("", ()), np.zeros((self.height, self.width, 3), np.uint8)
        try:
            await self._wait_loaded()
            view = await self._text_view()
            pixels = await self.sandbox.screenshot()
            meta["url"] = clip_url(self.sandbox.page.url)
        except SandboxCrashed as e:
            self.sandbox.check()  # a real crash still ends the episode as one
            meta["observe_error"] = str(e)
        self._refs = view.refs
        meta["title"] = clip_url(view.title)
        return pixels, view.text, meta

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        with self.sandbox.busy():
            obs, info = await super().areset(seed=seed, options=options)
        if self.spare_contexts and not self._restartable():  # the next episode's, in idle time
            self.sandbox.prepare_spare(
                self.url, timeout_s=self.op_timeout_s, preload=self._preload_script()
            )
        frames = "on demand" if self.sandbox.unthrottled_frames else "60 Hz"
        return obs, {**info, "browser_context": self.sandbox.last_open, "frames": frames}

    def _preload_script(self) -> str | None:
        return seeded_random_js(0) if self.page_task.preload else None

    # ------------------------------------------------------------ episode end on navigation

    async def astep(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        with self.sandbox.busy():
            obs, reward, terminated, truncated, info = await super().astep(action)
        left = self.sandbox.left_to
        if left is not None and not terminated and not truncated:
            truncated = True
            info = {**info, TRUNCATED_REASON: f"the page left the task page for {left}"}
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------ observation

    async def _text_view(self) -> dom.TextView:
        args = {
            "width": self.width,
            "height": self.height,
            "maxLines": dom.MAX_LINES,
            "nameLimit": dom.NAME_LIMIT,
            "exclude": self.exclude,
        }
        for attempt in range(2):
            try:
                result = await self.sandbox.call(self.sandbox.page.evaluate(dom.TEXT_VIEW_JS, args))
                return dom.TextView.from_js(result)
            except NavigationError:
                if attempt == 0:  # the page is mid-navigation: give the new one a moment
                    await self._wait_loaded()
        return dom.TextView("", ())

    async def _wait_loaded(self) -> None:
        """Give a page that is navigating up to 2 s to load (never raises for a live one)."""
        try:
            await self.sandbox.call(self.sandbox.page.wait_for_load_state("load", timeout=2000))
        except SandboxCrashed:
            self.sandbox.check()
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------ actions

    def _check_point(self, x: int, y: int, what: str) -> None:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise A.ActionError(
                f"{what} ({x}, {y}) is outside the {self.width}x{self.height} viewport: "
                f"x must be in 0..{self.width - 1} and y in 0..{self.height - 1}"
            )

    def _check_text(self, text: str) -> None:
        if len(text) > self.max_type_chars:
            raise A.ActionError(
                f"text of {len(text):,} characters is longer than the limit of "
                f"{self.max_type_chars:,} characters per type action; type it in parts"
            )

    async def _act(self, action: A.Action) -> None:
        page, call = self.sandbox.page, self.sandbox.call
        mouse = page.mouse
        if isinstance(action, A.Click):
            self._check_point(action.x, action.y, "click")
            await call(
                mouse.click(action.x, action.y, button=action.button, click_count=action.count)
            )  # type: ignore[arg-type]
        elif isinstance(action, A.Move):
            self._check_point(action.x, action.y, "move")
            await call(mouse.move(action.x, action.y))
        elif isinstance(action, A.Drag):
            self._check_point(action.x, action.y, "drag start")
            self._check_point(action.to_x, action.to_y, "drag end")
            await call(mouse.move(action.x, action.y))
            await call(mouse.down())
            await call(mouse.move(action.to_x, action.to_y, steps=8))
            await call(mouse.up())
            await self._settle(action.to_x, action.to_y)
        elif isinstance(action, A.Scroll):
            self._check_point(action.x, action.y, "scroll")
            await call(mouse.move(action.x, action.y))
            await call(mouse.wheel(action.dx, action.dy))
            await self._settle(action.x, action.y)
        elif isinstance(action, A.TypeText):
            self._check_text(action.text)
            await self.sandbox.type_text(action.text)
        elif isinstance(action, A.Key):
            combo = parse_combo(action.combo).playwright()
            await call(page.keyboard.press(combo), action_errors=("Unknown key",))
        elif isinstance(action, A.ClickElement):
            info = await self._locate(action.ref)
            await call(mouse.click(info["x"], info["y"]))
        elif isinstance(action, A.TypeElement):
            self._check_text(action.text)
            await self._type_element(action.ref, action.text)
        elif isinstance(action, A.SelectElement):
            await self._select_element(action.ref, action.value)
        elif isinstance(action, A.Wait):
            longest = max(0.0, self.op_timeout_s - 0.5)  # a longer wait would look like a hang
            if action.ms / 1000 > longest:
                raise A.ActionError(
                    f"wait({action.ms}) is longer than this env allows ({longest * 1000:.0f} ms, "
                    f"its operation timeout is {self.op_timeout_s:g} s)"
                )
            await asyncio.sleep(action.ms / 1000)
        else:  # Done/Fail never reach the adapter
            raise A.ActionError(f"{A.format_action(action)} is not performed by the browser")

    async def _settle(self, x: int, y: int) -> None:
        """Let smooth scrolling (wheel, drag auto-scroll) at (x, y) finish before observing."""
        await self.sandbox.call(self.sandbox.page.evaluate(_SETTLE_JS, [x, y]))

    def _unknown_ref(self, ref: int) -> A.ActionError:
        return A.ActionError(
            f"no element with ref {ref}; refs in the text view are {dom.format_refs(self._refs)}"
        )

    async def _locate(self, ref: int) -> dict[str, Any]:
        """The element's center in viewport pixels, or ActionError saying why not."""
        info = await self.sandbox.call(
            self.sandbox.page.evaluate(dom.LOCATE_JS, [ref, self.width, self.height])
        )
        if not info["found"]:
            raise self._unknown_ref(ref)
        tag = info["tag"]
        if info["w"] <= 0 or info["h"] <= 0:
            raise A.ActionError(f"element {ref} (<{tag}>) is not visible (it has no size)")
        x, y = info["x"], info["y"]
        if not info["inside"]:
            raise A.ActionError(
                f"element {ref} (<{tag}>) is outside the {self.width}x{self.height} viewport "
                f"(center at ({info['cx']:.0f}, {info['cy']:.0f})) and scrolling did not "
                "bring it in"
            )
        if info["covered"]:
            raise A.ActionError(
                f"element {ref} (<{tag}>) is covered by {info['covered']} at ({x:.0f}, {y:.0f})"
            )
        return info

    async def _type_element(self, ref: int, text: str) -> None:
        info = await self._locate(ref)
        typeable = (
            (info["tag"] == "input" and info["type"] in _TEXT_INPUT_TYPES)
            or info["tag"] == "textarea"
            or info["editable"]
        )
        if not typeable:
            kind = f"<input type={info['type']}>" if info["tag"] == "input" else f"<{info['tag']}>"
            raise A.ActionError(f"element {ref} ({kind}) does not take text")
        if info["disabled"]:
            raise A.ActionError(f"element {ref} (<{info['tag']}>) is disabled")
        keyboard = self.sandbox.page.keyboard
        await self.sandbox.call(self.sandbox.page.mouse.click(info["x"], info["y"]))
        await self.sandbox.call(keyboard.press("Control+a"))
        if text:
            await self.sandbox.type_text(text)
        else:
            await self.sandbox.call(keyboard.press("Backspace"))

    async def _select_element(self, ref: int, value: str) -> None:
        result = await self.sandbox.call(self.sandbox.page.evaluate(dom.SELECT_JS, [ref, value]))
        error = result.get("error")
        if error is None:
            return
        if error == "missing":
            raise self._unknown_ref(ref)
        if error == "not-select":
            raise A.ActionError(
                f"element {ref} is a <{result['tag']}>, not a <select>; "
                "use click_element on the option you want instead"
            )
        if error == "no-option":
            raise A.ActionError(
                f"select {ref} has no option {value!r}; its options are "
                f"{json.dumps(result['options'])}"
            )
        raise A.ActionError(
            f"select {ref}: the {'option' if 'option' in error else 'select'} is disabled"
        )


def make_page_env(
    page: str,
    *,
    instruction: str | None = None,
    reward: str | None = None,
    done: str | None = None,
    max_steps: int = 30,
    feasible: bool = True,
    task_id: str = "browser/page",
    **env_kwargs: Any,
) -> BrowserEnv:
    """A :class:`BrowserEnv` on any local ``page`` (for ``farm serve module:factory``).

    ``reward`` and ``done`` are JavaScript expressions evaluated after every
    action (see :class:`ScriptedPage`); e.g.::

        farm serve env_adapters.browser.env:make_page_env \\
            --env-kwargs '{"page": "/srv/form.html", "done": "window.submitted === true"}'
    """
    evaluator: dict[str, Any] = {"name": "js"}
    if reward is not None:
        evaluator["reward"] = reward
    if done is not None:
        evaluator["done"] = done
    task = TaskSpec(
        id=task_id,
        kind="browser",
        setup={"page": page},
        evaluator=evaluator,
        max_steps=max_steps,
        feasible=feasible,
        instruction=instruction,
        description=f"the local page {page}",
    )
    return BrowserEnv(task, **env_kwargs)
