"""Only a refusal the toolchain's build recorded skips a test (tests/refusals.py): the CRDs' and
tools' skips quote it, and a component missing without one fails, saying what to run."""

from __future__ import annotations

import pytest

from refusals import refusal, skip_if_refused_else_fail


def test_a_recorded_refusal_skips_quoting_the_proxy_and_anything_else_missing_fails(tmp_path):
    (tmp_path / "UNAVAILABLE").write_text("kueue: go: example.com/kueue@v0.19.2: 410 Gone\n")
    assert refusal("kueue", tmp_path) == f"{tmp_path / 'UNAVAILABLE'}: kueue: go: example.com/kueue@v0.19.2: 410 Gone"
    assert refusal("volcano", tmp_path) is None
    with pytest.raises(pytest.skip.Exception, match="Kueue's CRDs are missing; the proxy refused it .*410 Gone"):
        skip_if_refused_else_fail("kueue", tmp_path, "Kueue's CRDs are missing")
    with pytest.raises(pytest.fail.Exception, match=r"Volcano's CRDs are missing: run `make setup`"):
        skip_if_refused_else_fail("volcano", tmp_path, "Volcano's CRDs are missing")
    (tmp_path / "UNAVAILABLE").unlink()  # a build that was refused nothing
    with pytest.raises(pytest.fail.Exception):
        skip_if_refused_else_fail("kueue", tmp_path, "Kueue's CRDs are missing")
