"""``toy/pixels``: large uint8 image observations (720x1280x3 by default).

Frames are generated once per reset from the seed; each step returns a fresh
copy with a step counter stamped in the corner, so observations are new
objects, deterministic, and cheap to produce.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PixelsEnv(gym.Env):
    metadata = {"render_modes": [], "farm.executor": "inline"}

    def __init__(
        self, height: int = 720, width: int = 1280, channels: int = 3, episode_length: int = 1000
    ):
        self.observation_space = spaces.Box(0, 255, (height, width, channels), np.uint8)
        self.action_space = spaces.Discrete(4)
        self.episode_length = episode_length
        self._frame = np.zeros((height, width, channels), np.uint8)
        self._t = 0

    def _obs(self) -> np.ndarray:
        frame = self._frame.copy()
        frame[:4, :4] = self._t % 256
        return frame

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._frame = self.np_random.integers(0, 256, self._frame.shape, dtype=np.uint8)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any):
        self._t += 1
        self._frame[self._t % self._frame.shape[0]] = int(action) * 60
        return self._obs(), float(action == 0), False, self._t >= self.episode_length, {}
