"""The one way the tests wait: poll a condition until it holds, bounded, and stop at once when
waiting has become pointless (the process that was to make it hold has ended)."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 1.0,
    gone: Optional[Callable[[], Optional[str]]] = None,
    not_yet: tuple[type[BaseException], ...] = (),
) -> Any:
    """Polls until predicate() returns something truthy, which it returns.

    `gone()`, when given, says why the condition can no longer come (e.g. "server.log exited (1)"),
    or None while it still can; it is asked after each failed poll. An exception from the predicate
    of a type in `not_yet` (a server not listening yet: OSError) counts as not yet, and is shown if
    the wait fails; any other ends the wait at once with its own traceback.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            result = predicate()
            if result:
                return result
            last = result
        except not_yet as error:
            last = error
        reason = gone() if gone else None
        if reason:  # what it did before it ended may have made the condition hold: one last look
            result = predicate()
            if result:
                return result
            raise AssertionError(f"{reason} before {what} (last: {result!r})")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(interval)
