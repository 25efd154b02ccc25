"""Prompts from the shared GUI observation, and model outputs back to actions.

A prompt is a chat: a system message with the action grammar, then one user
message with the instruction, the text view (at most ``max_lines`` element lines,
each clipped to ``max_line_chars``), the last ``history`` actions with their
errors, and the last action's error if there was one. The model answers with one
action in the text form (``click_element(3)``); :func:`parse_output` takes the
first line and checks it with the action parser. A malformed answer is still
sent to the env, which makes it a no-op step and reports the error; the next
prompt shows it to the model.

For a vision-language model (``PromptConfig.image``) the user message is a list of
parts instead of a string: the task line, then one ``{"type": "image"}`` part for
the current screenshot, then the rest as text. Only the current screenshot is
attached (earlier turns are the text history), downscaled by :func:`prompt_image`
to at most ``image_max_side`` pixels per side; the processor's chat template turns
the part into its image placeholder, and the pixels travel beside the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    image: bool = False  # attach the screenshot (LMPolicy sets it for vision-language models)
    image_max_side: int = 448  # the attached screenshot is downscaled to fit


def screen_text(text: str, cfg: PromptConfig) -> str:
    lines = [ln[: cfg.max_line_chars] for ln in text.splitlines() if ln.strip()]
    if len(lines) > cfg.max_lines:
        more = len(lines) - cfg.max_lines
        lines = [*lines[: cfg.max_lines], f"... {more} more elements"]
    return "\n".join(lines)


def _screenshot(obs: Mapping[str, Any]) -> np.ndarray | None:
    shot = obs.get("screenshot")
    arr = None if shot is None else np.asarray(shot)
    if arr is None or arr.ndim != 3 or arr.shape[2] not in (3, 4) or 0 in arr.shape[:2]:
        return None
    return arr


def prompt_image(obs: Mapping[str, Any], cfg: PromptConfig) -> np.ndarray | None:
    """The screenshot to attach (a new HxWx3 uint8 array, at most ``image_max_side`` per
    side), or None when ``cfg.image`` is off or the observation has none."""
    arr = _screenshot(obs) if cfg.image else None
    if arr is None:
        return None
    h, w = arr.shape[:2]
    scale = cfg.image_max_side / max(h, w)
    if arr.dtype == np.uint8 and arr.shape[2] == 3 and scale >= 1:
        return arr.copy()  # the sample keeps it; the env may reuse its buffer
    from PIL import Image

    img = Image.fromarray(arr.astype(np.uint8)).convert("RGB")
    if scale < 1:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        img = img.resize(size, Image.Resampling.LANCZOS)
    return np.asarray(img)


def build_messages(
    obs: Mapping[str, Any],
    history: Sequence[tuple[str, str | None]] = (),
    cfg: PromptConfig = PromptConfig(),
) -> list[dict[str, Any]]:
    """The chat for one decision. ``history``: (action, error or None), oldest first.

    With ``cfg.image`` and a screenshot in ``obs``, the user message's content is a
    list of parts with one image part after the task line (see :func:`prompt_image`
    for the pixels)."""
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
    user: str | list[dict[str, str]] = "\n".join(parts)
    if cfg.image and _screenshot(obs) is not None:
        # task, screenshot, then the rest: a prompt cut to fit keeps its head through the
        # image and its end (history, "Next action:")
        user = [
            {"type": "text", "text": parts[0] + "\n"},
            {"type": "image"},
            {"type": "text", "text": "\n" + "\n".join(parts[1:])},
        ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


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
