"""Sandbox orchestration: ``farm up`` / ``status`` / ``down``, the controller
(supervision, self-healing, leases), the control service and the backends
(local processes, Docker containers, Ray actors); see docs/architecture.md.
"""
