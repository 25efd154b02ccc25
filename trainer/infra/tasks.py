"""Which task names a job's env accepts (checked before anything starts)."""

from __future__ import annotations

import importlib

from trainer.api.spec import JobSpec
from trainer.errors import JobSpecError

#: env id -> "module:name" of the task names (or a function returning them) that its
#: reset option ``task`` takes
SUITES = {
    "miniwob/suite": "env_adapters.browser.miniwob:suite_task_names",
    "toy/gui": "env_adapters.toy.gui:TASKS",
}


def known_tasks(env_id: str) -> list[str] | None:
    """The task names of ``env_id``'s suite, or None when farm does not know them."""
    target = SUITES.get(env_id)
    if target is None:
        return None
    module, func = target.split(":")
    try:
        found = getattr(importlib.import_module(module), func)
    except ImportError as e:
        raise JobSpecError(f"sandboxes.env: {env_id} cannot be loaded here: {e}") from None
    return list(found() if callable(found) else found)


def check_tasks(spec: JobSpec) -> None:
    """Every task of the spec exists in the env's suite; the lists are sensible."""
    names = known_tasks(spec.sandboxes.env)
    fields = {
        "tasks.train": spec.tasks.train,
        "tasks.infeasible": spec.tasks.infeasible,
        "tasks.eval.tasks": spec.tasks.eval.tasks or [],
    }
    for key, tasks in fields.items():
        if len(set(tasks)) != len(tasks):
            raise JobSpecError(f"{key}: a task is listed twice: {tasks}")
        if names is None:
            continue
        unknown = [t for t in tasks if t not in names]
        if unknown:
            close = [n for n in names if any(u.split("-")[0] in n for u in unknown)][:8]
            raise JobSpecError(
                f"{key}: no task {', '.join(map(repr, unknown))} in {spec.sandboxes.env}"
                + (f" (similar: {', '.join(close)})" if close else "")
            )
    both = set(spec.tasks.train) & set(spec.tasks.infeasible)
    if both:
        raise JobSpecError(f"tasks.infeasible: {sorted(both)} also listed in tasks.train")
