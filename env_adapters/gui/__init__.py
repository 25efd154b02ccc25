"""The GUI interface shared by every sandbox kind: actions, spaces, task specs, episode logic."""

from env_adapters.gui.actions import Action, ActionError, format_action, parse_action
from env_adapters.gui.env import GuiEnv, SandboxCrashed
from env_adapters.gui.tasks import TaskSpec

__all__ = [
    "Action",
    "ActionError",
    "GuiEnv",
    "SandboxCrashed",
    "TaskSpec",
    "format_action",
    "parse_action",
]
