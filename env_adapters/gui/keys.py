"""Key combos of ``key("ctrl+shift+a")``: parsed once, translated per sandbox kind."""

from __future__ import annotations

from dataclasses import dataclass

from env_adapters.gui.actions import ActionError

MODIFIERS = {
    "ctrl": "Control",
    "control": "Control",
    "shift": "Shift",
    "alt": "Alt",
    "option": "Alt",
    "meta": "Meta",
    "cmd": "Meta",
    "command": "Meta",
    "super": "Meta",
    "win": "Meta",
}
NAMED_KEYS = {
    name.lower(): name
    for name in (
        "Enter",
        "Tab",
        "Backspace",
        "Delete",
        "Escape",
        "Space",
        "ArrowUp",
        "ArrowDown",
        "ArrowLeft",
        "ArrowRight",
        "Home",
        "End",
        "PageUp",
        "PageDown",
        "Insert",
        *(f"F{i}" for i in range(1, 13)),
    )
}
ALIASES = {
    "return": "Enter",
    "esc": "Escape",
    "del": "Delete",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "pgup": "PageUp",
    "pgdn": "PageDown",
    "backspace": "Backspace",
    "space": "Space",
}


@dataclass(frozen=True)
class KeyCombo:
    """Canonical modifiers (Control, Shift, Alt, Meta) and one key (a named key or one char)."""

    modifiers: tuple[str, ...]
    key: str

    def playwright(self) -> str:
        key = " " if self.key == "Space" else self.key
        return "+".join((*self.modifiers, key))


def parse_combo(combo: str) -> KeyCombo:
    """``"ctrl+a"``, ``"Enter"``, ``"shift+Tab"`` -> :class:`KeyCombo`; ActionError if unknown."""
    parts = combo.split("+") if combo != "+" else ["+"]
    if combo.endswith("++"):
        parts = [*combo[:-2].split("+"), "+"]
    *mods, key = [p.strip() for p in parts]
    modifiers: list[str] = []
    for m in mods:
        canonical = MODIFIERS.get(m.lower())
        if canonical is None:
            raise ActionError(
                f"unknown modifier {m!r} in key({combo!r}); use ctrl, shift, alt, meta"
            )
        if canonical not in modifiers:
            modifiers.append(canonical)
    if len(key) == 1 and key.isprintable():
        return KeyCombo(tuple(modifiers), key)
    lower = key.lower()
    named = NAMED_KEYS.get(lower) or ALIASES.get(lower) or MODIFIERS.get(lower)
    if named is None:
        raise ActionError(
            f"unknown key {key!r} in key({combo!r}); use a single character or one of "
            f"{', '.join(sorted(NAMED_KEYS.values()))}"
        )
    return KeyCombo(tuple(modifiers), named)
