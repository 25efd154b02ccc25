"""Sandbox orchestration: local processes, Docker and Ray backends (not built yet)."""
