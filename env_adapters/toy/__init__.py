"""Toy environments for tests, demos and benchmarks (env ids ``toy/<name>``).

* ``toy/text-task``: a deterministic multi-step text task with a verifiable reward;
* ``toy/latency``: a tiny env whose step time follows a heavy-tailed distribution;
* ``toy/pixels``: an env with large uint8 image observations (720x1280x3 by default);
* ``toy/gui``: MiniWoB-like GUI tasks in pure Python with the GUI sandboxes' spaces and
  injectable heavy-tailed latency (``oracle_action`` solves them).
"""

from env_adapters.toy.gui import ToyGuiEnv, oracle_action
from env_adapters.toy.latency import Latency, LatencyEnv
from env_adapters.toy.pixels import PixelsEnv
from env_adapters.toy.text_task import TextTaskEnv, solve_instruction
from farm.registry import register

register(
    "toy/text-task", TextTaskEnv, description="spell a word (or its reverse) one letter per step"
)
register("toy/latency", LatencyEnv, description="4-float env with heavy-tailed step latency")
register("toy/pixels", PixelsEnv, description="image observations, 720x1280x3 uint8 by default")
register(
    "toy/gui",
    ToyGuiEnv,
    description="MiniWoB-like GUI tasks in pure Python (GUI spaces), task per reset, latency",
)

__all__ = [
    "Latency",
    "LatencyEnv",
    "PixelsEnv",
    "TextTaskEnv",
    "ToyGuiEnv",
    "oracle_action",
    "solve_instruction",
]
