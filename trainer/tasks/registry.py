"""Where a user's task comes from: `module:factory`, or the name an installed package gives it under
the `ddp_infra.tasks` entry point group (`[project.entry-points."ddp_infra.tasks"]` in its
pyproject.toml). The factory is called as `factory(TaskContext) -> Task`."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable, Iterable

from trainer.tasks.options import TaskOptions
from trainer.tasks.task import Task, TaskContext

ENTRY_POINT_GROUP = "ddp_infra.tasks"

Factory = Callable[[TaskContext], Task]


class TaskNotFound(ValueError):
    pass


def installed_tasks() -> dict[str, str]:
    """Each installed task's name and its `module:factory`."""
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def factory_of(reference: str, built_in: Iterable[str]) -> Factory:
    installed = installed_tasks()
    target = installed.get(reference, reference)
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        names = ", ".join(sorted(installed)) or "none installed"
        raise TaskNotFound(
            f"task {reference!r}: neither a built-in task ({', '.join(built_in)}), nor a task an installed package "
            f"names (entry points {ENTRY_POINT_GROUP}: {names}), nor module:factory (such as mypackage.task:make_task)"
        )
    try:
        found = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # the task's module is there and fails to import something of its own: its traceback says what
        raise TaskNotFound(
            f"task {reference!r}: no module {exc.name!r} to import; install the task's package in the training image "
            f"(a Dockerfile FROM the trainer's, docs/trainer.md)"
        ) from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TaskNotFound(f"task {reference!r}: module {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise TaskNotFound(f"task {reference!r}: {target} is a {type(found).__name__}, not a function that makes a Task")
    return found


def make_user_task(reference: str, built_in: Iterable[str], options: TaskOptions, seed: int, data_dir: Path) -> Task:
    factory = factory_of(reference, built_in)
    task = factory(TaskContext(options, seed, data_dir))
    if not isinstance(task, Task):
        raise TypeError(f"task {reference!r}: its factory returned a {type(task).__name__}, not a trainer.tasks.task.Task")
    options.refuse_unread(reference)
    return task
