"""The tests' one way of waiting: what counts as "not yet", and what ends the wait at once."""

from __future__ import annotations

import pytest
from waiting import wait_for


def polls(*answers):
    """A predicate answering each of `answers` in turn (an exception in it is raised)."""
    left = list(answers)

    def predicate():
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return predicate


def test_it_returns_the_first_truthy_answer():
    assert wait_for(polls(None, 0, "", {"step": 3}), 10, "a step", interval=0) == {"step": 3}


def test_an_unexpected_error_ends_the_wait_at_once_with_its_own_traceback():
    predicate = polls(None, IndexError("list index out of range"), "never asked")
    with pytest.raises(IndexError, match="list index out of range"):
        wait_for(predicate, 10, "a [DONE] line", interval=0)


def test_only_the_errors_named_not_yet_count_as_not_yet_and_the_last_one_is_shown_if_it_never_comes():
    refused = ConnectionRefusedError(111, "Connection refused")
    assert wait_for(polls(refused, refused, True), 10, "a server", interval=0, not_yet=(OSError,)) is True
    with pytest.raises(AssertionError, match=r"timed out after 0 s waiting for a server \(last: ConnectionRefusedError"):
        wait_for(polls(refused, refused), 0, "a server", interval=0, not_yet=(OSError,))


def test_a_gone_process_ends_the_wait_after_one_last_look():
    assert wait_for(polls(None, "written"), 10, "a file", interval=0, gone=lambda: "the writer exited (0)") == "written"
    with pytest.raises(AssertionError, match=r"the writer exited \(1\) before a file"):
        wait_for(polls(None, None), 10, "a file", interval=0, gone=lambda: "the writer exited (1)")
