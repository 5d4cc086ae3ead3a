"""An elastic JobSet (`nodes: 2:3`) on the controllers' cluster, where the JobSet controller runs:
its Job replaces a lost pod while the world goes on smaller, and the JobSet never restarts the
world (the journey: elastic_journey.py)."""

from __future__ import annotations

import pytest

from elastic_journey import journey

pytestmark = [pytest.mark.timeout(1500), pytest.mark.controllers("jobset")]


def test_an_elastic_jobset_grows_shrinks_and_grows_again_and_trains_every_sample_once(
    controllers_cluster, controllers_dev_image, controllers_stack
):
    journey(controllers_cluster, controllers_stack)
