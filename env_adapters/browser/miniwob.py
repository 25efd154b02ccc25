"""The MiniWoB++ suite: every task page of the ``miniwob`` package as ``miniwob/<task>``.

Each task is a :class:`~env_adapters.gui.TaskSpec` (``kind="browser"``,
``setup={"page": file://.../<task>.html}``, ``evaluator={"name": "miniwob"}``)
run by a :class:`~env_adapters.browser.env.BrowserEnv` that observes a
160x210 area: exactly MiniWoB's task area (the ``#wrap`` div at the top left;
the package crops its screenshots to the same box), so the reward display to
its right is not in view. Pages lay out in a 500x320 window (the package's
``WINDOW_WIDTH x WINDOW_HEIGHT`` constants; its headless Chrome actually lays out
in a larger default viewport, so window-relative widgets such as jQuery UI
dialogs may sit elsewhere than in the package; in a 160x210 window
click-dialog's dialog would be pushed off-screen).

Episodes follow the package's own env (``miniwob.selenium_instance``): the
page is loaded (in a fresh browser context), then ``core.endEpisode(0)``,
``Math.seedrandom(<seed>)``, ``core.setDataMode("train")`` and
``core.startEpisodeReal()``; the instruction is ``core.getUtterance()`` once
``WOB_TASK_READY``. The same seed therefore gives the same utterance and page
as ``gymnasium.make("miniwob/<task>-v1").reset(seed=seed)``. Reset options:
``{"data_mode": "test"}`` like the package's.

After every action the env reads ``WOB_DONE_GLOBAL``: the step reward is the
**raw** reward ``WOB_RAW_REWARD_GLOBAL`` (deterministic; 0 until the task
ends), ``info["env_reward"]`` is the package's time-penalised
``WOB_REWARD_GLOBAL`` and ``info["reason"]`` the task's reason; the episode
terminates when ``WOB_DONE_GLOBAL``. A task's own JavaScript timer (10-30 s
of wall time) ends it too: ``reason == "timed out"``, raw reward -1. The
``START`` cover that MiniWoB shows after an episode is made inert, so a click
after the end never starts an unseeded episode; actions after the task ended
on its own are skipped (``info["action_skipped"]``), as in the package.
``episode_time_ms`` (env kwarg) replaces the task's time limit, e.g. for slow
(LLM) agents.

Infeasible variants (``miniwob/<task>-infeasible``, see :data:`INFEASIBLE`):
the same page, but the instruction (also written into the page's query box)
asks for something the page does not offer; the correct answer is ``fail()``.

``miniwob/suite`` (:class:`MiniWoBSuiteEnv`) is one sandbox that serves any of
these tasks, chosen per episode: ``reset(options={"task": "click-button"})``
(or ``"click-button-infeasible"``); see the class.

Not included: the FlightWoB tasks (``html/flight``), which need an HTTP server
and load full airline sites.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from env_adapters.browser.chromium import ChromiumSandbox
from env_adapters.browser.env import BrowserEnv, register_page_task
from env_adapters.gui import SandboxCrashed
from env_adapters.gui.tasks import TaskSpec, choose_task, did_you_mean
from farm.errors import ConfigError, MissingExtraError
from farm.registry import register

#: MiniWoB's task area (#wrap) = the observed area
TASK_WIDTH, TASK_HEIGHT = 160, 210
#: the browser window the pages lay out in (the package's WINDOW_WIDTH x WINDOW_HEIGHT)
WINDOW_WIDTH, WINDOW_HEIGHT = 500, 320
DEFAULT_MAX_STEPS = 50
#: tasks that need many actions (long forms, many checkboxes, inboxes, editors)
LONG_TASKS = frozenset(
    {
        "book-flight",
        "book-flight-nodelay",
        "click-checkboxes-large",
        "email-inbox",
        "email-inbox-forward-nl",
        "email-inbox-forward-nl-turk",
        "email-inbox-nl-turk",
        "form-sequence-2",
        "form-sequence-3",
        "login-user-popup",
        "social-media-all",
        "terminal",
        "text-editor",
        "use-colorwheel-2",
    }
)
#: tasks whose page keeps drawing while nobody acts (moving targets):
#: measured by ``bench/miniwob_frames.py`` (Chromium's idle CPU with frames drawn on
#: demand). Every other task is ``still``, and its sandbox draws frames on demand
#: (``BrowserEnv(unthrottled_frames=...)``): screenshots need not wait for 60 Hz ticks.
ANIMATED_TASKS = frozenset({"chase-circle", "moving-items"})
#: elements the text view leaves out (MiniWoB's reward display and click canvas)
TEXT_VIEW_EXCLUDE = "#reward-display, #click-canvas, #attention-canvas"
_READY_POLLS, _READY_POLL_S = 20, 0.05  # the package waits up to 1 s for WOB_TASK_READY


def _html_dir() -> Path:
    spec = importlib.util.find_spec("miniwob")  # locate without importing (selenium etc.)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("miniwob", "browser")
    return Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"


HTML_DIR = _html_dir()
#: every task page shipped in the miniwob package
TASKS: tuple[str, ...] = tuple(sorted(p.stem for p in HTML_DIR.glob("*.html")))


@dataclass(frozen=True)
class Infeasible:
    """An infeasible variant: ``template.format(x)`` for an ``x`` the page does not show."""

    task: str
    template: str
    candidates: tuple[str, ...]

    def instruction(self, seed: int, page_text: str) -> str:
        """The instruction for this episode: a seeded choice among absent candidates."""
        options = list(self.candidates)
        random.Random(seed).shuffle(options)
        for x in options:
            if not re.search(rf"(?<!\w){re.escape(x)}(?!\w)", page_text, re.IGNORECASE):
                return self.template.format(x)
        raise ConfigError(f"{self.task}: every infeasible candidate appears on the page")


#: ``miniwob/<name>-infeasible`` variants. Candidates are values the task never generates
#: (click-button's labels come from a fixed list, click-link's from lorem ipsum,
#: click-checkboxes' from 2-7 random characters, click-tab has three tabs).
INFEASIBLE: dict[str, Infeasible] = {
    v.task: v
    for v in (
        Infeasible(
            "click-button",
            'Click on the "{}" button.',
            ("Delete", "Save", "Retry", "Close", "Apply", "Back", "Send", "Done"),
        ),
        Infeasible(
            "click-link",
            'Click on the link "{}".',
            ("zebra", "harbor", "violet", "pencil", "falcon", "meadow", "copper", "lantern"),
        ),
        Infeasible(
            "click-checkboxes",
            "Select {} and click Submit.",
            ("Pineapple", "Waterfall", "Lighthouse", "Marigolds", "Sandstone", "Blueberry"),
        ),
        Infeasible("click-tab", "Click on Tab #{}.", ("4", "5", "6", "7", "8", "9")),
    )
}

_STATE_JS = """() => ({done: !!WOB_DONE_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL,
  reward: WOB_REWARD_GLOBAL, reason: WOB_REWARD_REASON})"""
_UTTERANCE_JS = """() => {
  const u = core.getUtterance();
  return (u !== null && typeof u === 'object') ? u.utterance : u;
}"""
_PAGE_TEXT_JS = """() => {
  const area = document.getElementById('area') || document.getElementById('wrap') || document.body;
  const parts = [area.innerText];
  for (const el of area.querySelectorAll('input, button, option, textarea')) parts.push(el.value);
  return parts.join(' ');
}"""
_SET_QUERY_JS = """(text) => {
  const q = document.getElementById('query');
  if (q) q.textContent = text;
}"""


class MiniWoBTask:
    """The MiniWoB episode logic (a :class:`~env_adapters.browser.env.PageTask`)."""

    #: start() re-seeds the page (``Math.seedrandom``), as the package does on its
    #: long-lived page: the next episode's page may be loaded ahead of time
    preload = True
    restartable = True  # the start script ends the last episode and starts the next
    seeds_itself = True  # the start script calls Math.seedrandom(seed) before the task draws

    def __init__(self, task: TaskSpec, *, episode_time_ms: int | None = None) -> None:
        self.task = task
        self.name = str(task.setup.get("miniwob_task", task.name))
        infeasible = task.setup.get("infeasible")
        self.infeasible = INFEASIBLE[str(infeasible)] if infeasible else None
        if episode_time_ms is not None and episode_time_ms < 1:
            raise ConfigError(f"episode_time_ms must be >= 1, got {episode_time_ms}")
        self.episode_time_ms = episode_time_ms

    def start_script(self, seed: int, data_mode: str) -> str:
        """The package's reset, in one script: force stop, seed, data mode, start."""
        time_limit = (
            f"core.EPISODE_MAX_TIME = {int(self.episode_time_ms)};" if self.episode_time_ms else ""
        )
        # repr(seed) as a JS literal, exactly as SeleniumInstance.set_seed writes it:
        # seedrandom hashes a number and its string form differently
        return f"""() => {{
  core.endEpisode(0);
  Math.seedrandom({int(seed)!r});
  core.setDataMode({json.dumps(data_mode)});
  {time_limit}
  core.startEpisodeReal();
  if (core.cover_div) core.cover_div.onclick = null;
  return WOB_TASK_READY ? {{u: ({_UTTERANCE_JS})()}} : null;
}}"""

    async def start(self, sandbox: ChromiumSandbox, seed: int, options: dict[str, Any]) -> str:
        page = sandbox.page
        data_mode = str(options.get("data_mode", "train"))
        # the start script returns the utterance when the task is ready at once (most are)
        ready = await sandbox.call(page.evaluate(self.start_script(seed, data_mode)))
        polls = 0
        while ready is None:
            polls += 1
            if polls > _READY_POLLS:
                raise SandboxCrashed(f"miniwob/{self.name} did not become ready (WOB_TASK_READY)")
            await asyncio.sleep(_READY_POLL_S)
            ready = await sandbox.call(
                page.evaluate(f"() => WOB_TASK_READY ? {{u: ({_UTTERANCE_JS})()}} : null")
            )
        utterance = str(ready["u"])
        if self.infeasible is None:
            return utterance
        text = str(await sandbox.call(page.evaluate(_PAGE_TEXT_JS)))
        instruction = self.infeasible.instruction(seed, text)
        await sandbox.call(page.evaluate(_SET_QUERY_JS, instruction))
        return instruction

    async def _state(self, sandbox: ChromiumSandbox) -> dict[str, Any]:
        return await sandbox.call(sandbox.page.evaluate(_STATE_JS))

    async def before_action(self, sandbox: ChromiumSandbox) -> str | None:
        state = await self._state(sandbox)
        if state["done"]:
            return f"the task had already ended ({state['reason']})"
        return None

    async def evaluate(self, sandbox: ChromiumSandbox) -> tuple[float, bool, dict[str, Any]]:
        state = await self._state(sandbox)
        done = bool(state["done"])
        reason = state["reason"]
        if not isinstance(reason, (str, int, float, bool, type(None))):
            reason = json.dumps(reason, default=str)
        info = {
            "env_reward": float(state["reward"] or 0.0) if done else 0.0,
            "reason": reason,
        }
        return (float(state["raw"] or 0.0) if done else 0.0), done, info


def _descriptions() -> dict[str, str]:
    """Task name -> the "## Description" of its env class in ``miniwob/envs/miniwob_envs.py``
    (read with :mod:`ast`: importing the package would import Selenium)."""
    try:
        tree = ast.parse((HTML_DIR.parents[1] / "envs" / "miniwob_envs.py").read_text())
    except (OSError, SyntaxError):
        return {}
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        doc = ast.get_docstring(node) or ""
        name = next(
            (
                stmt.value.value
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "subdomain" for t in stmt.targets)
                and isinstance(stmt.value, ast.Constant)
            ),
            None,
        )
        m = re.search(r"## Description\s+(.+?)(?:\n\s*\n|$)", doc, re.DOTALL)
        if isinstance(name, str) and m:
            # "[book-flight] Removed animation." -> "like book-flight: Removed animation."
            text = re.sub(r"^\[([\w.-]+)\]\s*", r"like \1: ", " ".join(m.group(1).split()))
            found[name] = text
    return found


def _title(name: str) -> str:
    try:
        text = (HTML_DIR / f"{name}.html").read_text(errors="replace")
    except OSError:
        return ""
    m = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return " ".join(m.group(1).split()) if m else ""


_DESCRIPTIONS = _descriptions()


def task_spec(name: str, *, infeasible: bool = False) -> TaskSpec:
    """The TaskSpec of ``miniwob/<name>`` (or of its infeasible variant)."""
    if name not in TASKS:
        raise ConfigError(f"no MiniWoB task {name!r} in {HTML_DIR}")
    if infeasible and name not in INFEASIBLE:
        raise ConfigError(f"{name} has no infeasible variant; variants: {sorted(INFEASIBLE)}")
    setup: dict[str, Any] = {
        "page": (HTML_DIR / f"{name}.html").as_uri(),
        "exclude": TEXT_VIEW_EXCLUDE,
        "miniwob_task": name,
        "still": name not in ANIMATED_TASKS,
    }
    about = _DESCRIPTIONS.get(name) or _title(name) or name
    if infeasible:
        setup["infeasible"] = name
    return TaskSpec(
        id=f"miniwob/{name}-infeasible" if infeasible else f"miniwob/{name}",
        kind="browser",
        setup=setup,
        evaluator={"name": "miniwob"},
        max_steps=2 * DEFAULT_MAX_STEPS if name in LONG_TASKS else DEFAULT_MAX_STEPS,
        feasible=not infeasible,
        description=(
            f"MiniWoB++ infeasible (answer: fail()): {about}"
            if infeasible
            else f"MiniWoB++: {about}"
        ),
    )


def make_env(
    name: str,
    *,
    infeasible: bool = False,
    width: int = TASK_WIDTH,
    height: int = TASK_HEIGHT,
    window_width: int = WINDOW_WIDTH,
    window_height: int = WINDOW_HEIGHT,
    episode_time_ms: int | None = None,
    **env_kwargs: Any,
) -> BrowserEnv:
    """``miniwob/<name>`` as a :class:`BrowserEnv` (``env_kwargs`` go to BrowserEnv)."""
    spec = task_spec(name, infeasible=infeasible)
    logic = MiniWoBTask(spec, episode_time_ms=episode_time_ms)
    return BrowserEnv(
        spec,
        width=width,
        height=height,
        window_width=window_width,
        window_height=window_height,
        page_task=logic,
        **env_kwargs,
    )


SUITE_ID = "miniwob/suite"
_INFEASIBLE_SUFFIX = "-infeasible"


def suite_task_names() -> tuple[str, ...]:
    """Every task ``miniwob/suite`` can run: each of :data:`TASKS`, then the infeasible
    variants (``<task>-infeasible``) of those in :data:`INFEASIBLE`."""
    return TASKS + tuple(f"{n}{_INFEASIBLE_SUFFIX}" for n in INFEASIBLE if n in TASKS)


def suite_task_spec(name: str) -> TaskSpec:
    """The TaskSpec of a suite task name (``click-button``, ``click-button-infeasible``)."""
    if name.endswith(_INFEASIBLE_SUFFIX) and name not in TASKS:
        return task_spec(name[: -len(_INFEASIBLE_SUFFIX)], infeasible=True)
    return task_spec(name)


class MiniWoBSuiteEnv(BrowserEnv):
    """``miniwob/suite``: one Chromium sandbox that runs any MiniWoB++ task, chosen at reset.

    ``reset(seed=..., options={"task": "click-button"})`` runs that task's episode
    exactly as ``miniwob/click-button`` would (same seed, same episode; the task's
    ``max_steps``; ``info["task"]`` is ``miniwob/click-button``, ``info["feasible"]``
    its feasibility); ``"<task>-infeasible"`` runs the infeasible variant (a
    ``miniwob/`` prefix is accepted too). Without the option the episode runs
    ``default_task``. Other options (``data_mode``) work as for single tasks. A
    task that does not exist or is not in ``tasks`` raises
    :class:`~farm.errors.InvalidArgumentError` (INVALID_ARGUMENT for a remote
    client, whose session lives on); the env stays usable.

    Spaces are those of every ``miniwob/<task>`` (160x210). The spare context is
    prepared for the page of the last episode's task: the next episode of the same
    task starts preloaded, one of another task opens a new context
    (``info["browser_context"]``). ``metadata["farm.tasks"]`` lists the allowed tasks.

    Args:
        tasks: the task names this env may run (default: :func:`suite_task_names`).
        default_task: the task of a reset without ``options["task"]`` (default: the
            first of ``tasks``).
        episode_time_ms, width, height, window_width, window_height, env_kwargs: as
            for :func:`make_env`.
    """

    def __init__(
        self,
        tasks: Sequence[str] | None = None,
        *,
        default_task: str | None = None,
        width: int = TASK_WIDTH,
        height: int = TASK_HEIGHT,
        window_width: int = WINDOW_WIDTH,
        window_height: int = WINDOW_HEIGHT,
        episode_time_ms: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        known = suite_task_names()
        if isinstance(tasks, str):
            raise ConfigError(f"tasks must be a list of task names, got the string {tasks!r}")
        names = tuple(dict.fromkeys(_strip_suite(str(t)) for t in (tasks or known)))
        unknown = [t for t in names if t not in known]
        if unknown:
            raise ConfigError(
                f"{SUITE_ID}: unknown tasks {unknown}{did_you_mean(unknown[0], known)}"
            )
        default = _strip_suite(default_task) if default_task is not None else names[0]
        if default not in names:
            raise ConfigError(f"{SUITE_ID}: default_task {default_task!r} is not in tasks")
        self.tasks: tuple[str, ...] = names
        self.default_task = default
        self.episode_time_ms = episode_time_ms
        spec = suite_task_spec(default)
        # one browser serves every task: frames on demand only if all of them are still
        env_kwargs.setdefault(
            "unthrottled_frames", all(suite_task_spec(t).setup["still"] for t in names)
        )
        super().__init__(
            spec,
            width=width,
            height=height,
            window_width=window_width,
            window_height=window_height,
            page_task=MiniWoBTask(spec, episode_time_ms=episode_time_ms),
            **env_kwargs,
        )
        self.metadata = {**self.metadata, "farm.task": SUITE_ID, "farm.tasks": list(names)}

    def task_for(self, options: dict[str, Any] | None) -> str:
        """The task name a reset with ``options`` runs (InvalidArgumentError if none)."""
        return choose_task(
            options,
            suite=SUITE_ID,
            served=self.tasks,
            known=suite_task_names(),
            default=self.default_task,
        )

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        spec = suite_task_spec(self.task_for(options))
        if spec.id != self.task.id:
            self.set_task(spec, MiniWoBTask(spec, episode_time_ms=self.episode_time_ms))
        return await super().areset(seed=seed, options=options)


def _strip_suite(name: str) -> str:
    return name.removeprefix("miniwob/")


register_page_task("miniwob", MiniWoBTask)
for _name in TASKS:
    _spec = task_spec(_name)
    register(_spec.id, partial(make_env, _name), description=_spec.description)
for _name in INFEASIBLE:
    if _name in TASKS:
        _spec = task_spec(_name, infeasible=True)
        register(_spec.id, partial(make_env, _name, infeasible=True), description=_spec.description)
register(
    SUITE_ID,
    MiniWoBSuiteEnv,
    description="MiniWoB++: any task, chosen per episode with reset(options={'task': name})",
)
