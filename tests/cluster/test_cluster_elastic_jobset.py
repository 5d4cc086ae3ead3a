"""An elastic JobSet (`nodes: 2:3`) under a gang scheduler, through the real `pulumi up` (the
journey: elastic_journey.py): admitted whole at its minimum or not at all, growing as room appears;
its Job replaces a lost pod while the world goes on smaller, and the JobSet never restarts the
world. Under Volcano on the controllers' cluster; under the Kubernetes scheduler's gang
(scheduling.k8s.io/v1beta1) on the Workload API's cluster."""

from __future__ import annotations

import pytest

from elastic_journey import journey

pytestmark = pytest.mark.timeout(1500)


@pytest.mark.controllers("jobset", "volcano")
def test_an_elastic_jobset_under_volcano_starts_whole_at_its_minimum_grows_shrinks_and_trains_every_sample_once(
    controllers_cluster, controllers_dev_image, controllers_stack
):
    journey(controllers_cluster, controllers_stack, {"scheduler": "volcano"})
