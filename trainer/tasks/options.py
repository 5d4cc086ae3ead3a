"""A user's task options: `--task-option KEY=VALUE`, repeated, read by the task's factory with a type
and a default. An option the factory never read is refused once it returns: a misspelt key would
otherwise train with the default, silently."""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

T = TypeVar("T")

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class TaskOptionError(ValueError):
    pass


class TaskOptions:
    def __init__(self, values: dict[str, str] | None = None):
        self._values = dict(values or {})
        self._read: set[str] = set()

    @classmethod
    def parse(cls, items: Iterable[str]) -> "TaskOptions":
        values: dict[str, str] = {}
        for item in items:
            key, equals, value = item.partition("=")
            if not equals or not key.strip():
                raise TaskOptionError(f"--task-option {item!r}: expected KEY=VALUE, such as hidden=64")
            if key in values:
                raise TaskOptionError(f"--task-option {key}: given twice ({values[key]!r} and {value!r}); give it once")
            values[key] = value
        return cls(values)

    def get_str(self, name: str, default: str, choices: Iterable[str] = ()) -> str:
        allowed = tuple(choices)
        return self._read_as(name, default, str, f"one of {', '.join(allowed)}" if allowed else "a string",
                             lambda value: not allowed or value in allowed)  # fmt: skip

    def get_int(self, name: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
        return self._read_as(name, default, int, _range_text("an integer", minimum, maximum), _within(minimum, maximum))

    def get_float(self, name: str, default: float, minimum: float | None = None, maximum: float | None = None) -> float:
        return self._read_as(name, default, float, _range_text("a number", minimum, maximum), _within(minimum, maximum))

    def get_bool(self, name: str, default: bool) -> bool:
        def parse(text: str) -> bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError(text)
            return text.lower() in _TRUE

        return self._read_as(name, default, parse, f"one of {', '.join(_TRUE + _FALSE)}", lambda value: True)

    def _read_as(self, name: str, default: T, parse: Callable[[str], T], allowed: str, valid: Callable[[T], bool]) -> T:
        self._read.add(name)
        if name not in self._values:
            return default
        text = self._values[name]
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not valid(value):
            raise TaskOptionError(f"--task-option {name}={text}: expected {allowed}")
        return value

    def refuse_unread(self, task: str) -> None:
        """Called once the factory returned: every option given must be one it reads."""
        unread = sorted(set(self._values) - self._read)
        if unread:
            reads = ", ".join(sorted(self._read)) or "none"
            raise TaskOptionError(f"task {task} has no option {', '.join(unread)} (the options it reads: {reads})")

    def as_dict(self) -> dict[str, str]:
        """The options as given, for the run's records (the model card, tracking)."""
        return dict(self._values)


def _within(minimum: float | None, maximum: float | None) -> Callable[[float], bool]:
    return lambda value: (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def _range_text(kind: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} from {minimum} to {maximum}"
    if minimum is not None:
        return f"{kind} of at least {minimum}"
    return f"{kind} of at most {maximum}" if maximum is not None else kind
