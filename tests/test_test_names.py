"""One naming rule for test files: a file in tests/<suite>/ is test_<suite>_<subject>.py, so that a
name says its suite wherever it is shown (pytest's summary, a CI log, the durations table) and no
two suites can hold files of the same name."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_file_of_a_suite_carries_the_suite_in_its_name():
    misnamed = [
        str(path.relative_to(TESTS))
        for suite in TESTS.iterdir() if suite.is_dir() and not suite.name.startswith((".", "_"))
        for path in suite.glob("test_*.py")
        if not path.name.startswith(f"test_{suite.name}_")
    ]  # fmt: skip
    assert not misnamed, misnamed
    assert len(list(TESTS.glob("*/test_*.py"))) > 50, "the suites' test files were not found"
