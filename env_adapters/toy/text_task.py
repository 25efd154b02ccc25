"""``toy/text-task``: spell a word, or spell it backwards, one letter per step.

Observation: ``{"instruction": Text, "typed": Text}``; action: ``Discrete(26)``
(letter ``a + action``). The episode terminates at the first wrong letter
(reward 0) or when the word is complete (reward 1): the reward is verified
against the target, so a policy cannot game it. Deterministic under a seed.
"""

from __future__ import annotations

import re
import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

WORDS = (
    "cat",
    "dog",
    "farm",
    "agent",
    "click",
    "button",
    "screen",
    "mouse",
    "window",
    "reward",
    "policy",
    "browser",
    "desktop",
    "phone",
    "task",
    "learn",
)
INSTRUCTION_CHARS = string.ascii_letters + string.digits + " .,\"'-"
_INSTRUCTION = {
    "spell": 'Type the word "{word}", one letter per step.',
    "reverse": 'Type the word "{word}" backwards, one letter per step.',
}


def target_of(mode: str, word: str) -> str:
    return word[::-1] if mode == "reverse" else word


def solve_instruction(instruction: str) -> list[int]:
    """The oracle: the actions that complete the task, read from the instruction alone."""
    m = re.search(r'"([a-z]+)"', instruction)
    if m is None:
        raise ValueError(f"no quoted word in instruction {instruction!r}")
    mode = "reverse" if "backwards" in instruction else "spell"
    return [ord(c) - ord("a") for c in target_of(mode, m.group(1))]


class TextTaskEnv(gym.Env):
    metadata = {"render_modes": [], "farm.executor": "inline"}

    def __init__(
        self, modes: tuple[str, ...] = ("spell", "reverse"), words: tuple[str, ...] = WORDS
    ):
        unknown = set(modes) - set(_INSTRUCTION)
        if unknown:
            raise ValueError(f"unknown modes {sorted(unknown)}; choose from {sorted(_INSTRUCTION)}")
        self.modes = tuple(modes)
        self.words = tuple(words)
        max_word = max(len(w) for w in self.words)
        self.observation_space = spaces.Dict(
            {
                "instruction": spaces.Text(128, min_length=1, charset=INSTRUCTION_CHARS),
                "typed": spaces.Text(max_word, min_length=0, charset=string.ascii_lowercase),
            }
        )
        self.action_space = spaces.Discrete(26)
        self._instruction = ""
        self._target = ""
        self._typed = ""

    def _obs(self) -> dict[str, str]:
        return {"instruction": self._instruction, "typed": self._typed}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        mode = options.get("mode") or self.modes[int(self.np_random.integers(len(self.modes)))]
        word = options.get("word") or self.words[int(self.np_random.integers(len(self.words)))]
        if mode not in _INSTRUCTION or not re.fullmatch(r"[a-z]+", str(word)):
            raise ValueError(
                f"invalid options {options!r}: mode in {sorted(_INSTRUCTION)}, word in [a-z]+"
            )
        self._instruction = _INSTRUCTION[mode].format(word=word)
        self._target = target_of(mode, word)
        self._typed = ""
        return self._obs(), {"mode": mode, "length": len(self._target)}

    def step(self, action: Any):
        letter = chr(ord("a") + int(action))
        self._typed += letter
        correct = self._target.startswith(self._typed)
        done = len(self._typed) == len(self._target)
        reward = 1.0 if correct and done else 0.0
        terminated = done or not correct
        info = {"correct": bool(correct)}
        return self._obs(), reward, terminated, False, info

    def solution(self) -> list[int]:
        """The oracle actions for the current episode."""
        return [ord(c) - ord("a") for c in self._target]
