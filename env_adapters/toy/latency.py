"""``toy/latency``: a tiny env whose step time follows a heavy-tailed distribution.

Models the slow, heavy-tailed steps of real sandboxes for the pool benchmark.
Step delays are drawn from their own generator (``latency_seed``), so two
instances with the same seed sleep the same sequence. Distributions:

* ``lognormal``: ``delay = median_s * exp(sigma * N(0, 1))``, mean ``median_s * exp(sigma^2 / 2)``;
* ``pareto``: ``delay = median_s / 2^(1/alpha) * (1 + Pareto(alpha))`` (median ``median_s``);
* ``constant``: ``delay = median_s``;  ``none``: no delay.

:class:`Latency` is the distribution alone (``toy/gui`` draws its step and
reset delays with it).

Both forms exist: ``step`` sleeps with ``time.sleep`` (for in-process and
subprocess vector envs), ``astep`` with ``asyncio.sleep`` (the farm server
awaits it, so one process serves many sleeping sessions).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

DISTRIBUTIONS = ("lognormal", "pareto", "constant", "none")


@dataclass(frozen=True)
class Latency:
    """A delay distribution (see module doc); :meth:`sample` draws from a caller's generator."""

    dist: str = "none"
    median_s: float = 0.0
    sigma: float = 1.0
    alpha: float = 1.5

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"dist must be one of {DISTRIBUTIONS}, got {self.dist!r}")
        if self.median_s < 0 or self.sigma < 0 or self.alpha <= 1:
            raise ValueError("need median_s >= 0, sigma >= 0, alpha > 1")

    @classmethod
    def of(cls, spec: Latency | Mapping[str, Any] | None) -> Latency:
        """``spec`` as a Latency: a dict of the fields (``{"dist": "pareto", "median_s":
        0.05, "alpha": 1.5}``), a Latency, or None (no delay)."""
        if spec is None:
            return cls()
        if isinstance(spec, Latency):
            return spec
        unknown = set(spec) - {"dist", "median_s", "sigma", "alpha"}
        if unknown:
            raise ValueError(
                f"unknown latency keys {sorted(unknown)}: use dist, median_s, sigma, alpha"
            )
        return cls(**spec)

    @property
    def mean_s(self) -> float:
        """The distribution's mean delay (analytic)."""
        if self.dist == "lognormal":
            return self.median_s * math.exp(self.sigma**2 / 2)
        if self.dist == "pareto":
            scale = self.median_s / 2 ** (1 / self.alpha)
            return scale * (1 + 1 / (self.alpha - 1))
        return self.median_s if self.dist == "constant" else 0.0

    def sample(self, rng: np.random.Generator) -> float:
        """One delay in seconds (draws from ``rng`` only for the random distributions)."""
        if self.dist == "lognormal":
            return float(self.median_s * math.exp(self.sigma * rng.standard_normal()))
        if self.dist == "pareto":
            scale = self.median_s / 2 ** (1 / self.alpha)
            return float(scale * (1 + rng.pareto(self.alpha)))
        return self.median_s if self.dist == "constant" else 0.0


class LatencyEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        dist: str = "lognormal",
        median_s: float = 0.01,
        sigma: float = 1.0,
        alpha: float = 1.5,
        episode_length: int = 200,
        latency_seed: int | None = None,
        obs_size: int = 4,
    ) -> None:
        if episode_length < 1:
            raise ValueError(f"need episode_length >= 1, got {episode_length}")
        self.latency = Latency(dist, median_s, sigma, alpha)
        self.dist, self.median_s, self.sigma, self.alpha = dist, median_s, sigma, alpha
        self.episode_length = episode_length
        self.observation_space = spaces.Box(-1.0, 1.0, (obs_size,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._delays = np.random.default_rng(latency_seed)
        self._t = 0
        self._state = np.zeros(obs_size, np.float32)
        self.total_delay_s = 0.0
        self.steps = 0

    @property
    def mean_delay_s(self) -> float:
        """The distribution's mean step delay (analytic)."""
        return self.latency.mean_s

    def sample_delay(self) -> float:
        return self.latency.sample(self._delays)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._state = self.np_random.uniform(-1, 1, self._state.shape).astype(np.float32)
        return self._state.copy(), {}

    def _transition(self, action: Any, delay: float):
        self._t += 1
        self.steps += 1
        self.total_delay_s += delay
        reward = 1.0 if (int(action) == 1) == (self._state[0] > 0) else 0.0
        self._state = self.np_random.uniform(-1, 1, self._state.shape).astype(np.float32)
        truncated = self._t >= self.episode_length
        return self._state.copy(), reward, False, truncated, {"delay_s": delay}

    def step(self, action: Any):
        delay = self.sample_delay()
        if delay:
            time.sleep(delay)
        return self._transition(action, delay)

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.reset(seed=seed, options=options)

    async def astep(self, action: Any):
        delay = self.sample_delay()
        if delay:
            await asyncio.sleep(delay)
        return self._transition(action, delay)

    async def aclose(self) -> None:
        self.close()
