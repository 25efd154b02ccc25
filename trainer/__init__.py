"""The asynchronous online RL trainer (not built yet: see the open trainer issue)."""
