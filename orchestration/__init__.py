"""Sandbox orchestration: ``farm up`` / ``status`` / ``down``, the controller
(supervision, self-healing, leases), the control service and the local backend.
The docker and ray backends are a later phase (see docs/architecture.md).
"""
