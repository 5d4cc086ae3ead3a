"""The run's closing line counts the `pulumi` commands the cluster journeys really ran, per cluster
(tests/cluster/conftest.py); no cluster."""

from __future__ import annotations

import conftest


def test_the_closing_line_counts_the_engine_commands_that_ran_on_each_cluster():
    ran = [("test", "up"), ("nodes", "up"), ("test", "destroy"), ("test", "up"), ("nodes", "refresh"), ("nodes", "destroy")]
    assert conftest.engine_commands_said(ran) == (
        "on test: 2 `pulumi up`, 1 `pulumi destroy`; on nodes: 1 `pulumi up`, 1 `pulumi refresh`, 1 `pulumi destroy`")
