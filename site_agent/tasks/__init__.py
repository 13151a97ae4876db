"""The site side of each job kind: one FLARE executor per kind, built on `executor.TaskExecutor`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil


def installed_task_classes() -> list[str]:
    """Import paths of the site tasks this agent installs: what a kit's allow-list must admit for its job kinds
    (the base classes in tasks/executor.py are not tasks)."""
    from site_agent.tasks.executor import TaskExecutor

    found = set()
    for info in pkgutil.iter_modules(__path__, f"{__name__}."):
        module = importlib.import_module(info.name)
        found |= {f"{c.__module__}.{c.__qualname__}" for _, c in inspect.getmembers(module, inspect.isclass)
                  if issubclass(c, TaskExecutor) and c.__module__ == module.__name__ != TaskExecutor.__module__}
    return sorted(found)
