"""Prompts from the shared GUI observation, and model outputs back to actions.

A prompt is a chat: a system message with the action grammar, then one user
message with the instruction, the text view (at most ``max_lines`` element lines,
each clipped to ``max_line_chars``), the last ``history`` actions with their
errors, and the last action's error if there was one. The model answers with one
action in the text form (``click_element(3)``); :func:`parse_output` takes the
first line and checks it with the action parser. A malformed answer is still
sent to the env, which makes it a no-op step and reports the error; the next
prompt shows it to the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from env_adapters.gui import actions as A

SYSTEM = (
    "You operate a graphical user interface. Each turn you see the task, the screen as "
    'text (one element per line: [ref] role "name" value=... @(x,y,w,h)) and your '
    "previous actions. Reply with exactly one action, for example click_element(3), "
    'type_element(5, "hello"), click(40, 60), key("Enter"), done() or fail() when the '
    "task cannot be done."
)


@dataclass(frozen=True)
class PromptConfig:
    max_lines: int = 40
    max_line_chars: int = 120
    history: int = 4


def screen_text(text: str, cfg: PromptConfig) -> str:
    lines = [ln[: cfg.max_line_chars] for ln in text.splitlines() if ln.strip()]
    if len(lines) > cfg.max_lines:
        more = len(lines) - cfg.max_lines
        lines = [*lines[: cfg.max_lines], f"... {more} more elements"]
    return "\n".join(lines)


def build_messages(
    obs: Mapping[str, Any],
    history: Sequence[tuple[str, str | None]] = (),
    cfg: PromptConfig = PromptConfig(),
) -> list[dict[str, str]]:
    """The chat for one decision. ``history``: (action, error or None), oldest first."""
    parts = [
        f"Task: {obs.get('instruction', '')}",
        "Screen:",
        screen_text(str(obs.get("text", "")), cfg),
    ]
    recent = list(history)[-cfg.history :]
    if recent:
        parts.append("Previous actions:")
        parts += [f"- {a}" + (f"  (error: {e})" if e else "") for a, e in recent]
    try:
        meta = json.loads(str(obs.get("metadata") or "{}"))
    except ValueError:
        meta = {}
    if isinstance(meta, dict) and meta.get("action_error"):
        parts.append(f"Your last action failed: {meta['action_error']}")
    parts.append("Next action:")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


def parse_output(text: str) -> tuple[str, str | None]:
    """``(action text, error or None)``: the first non-empty line of the model's answer."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not line:
        return "", "the model answered nothing"
    try:
        A.parse_action(line)
    except A.ActionError as e:
        return line, str(e)
    return line, None
