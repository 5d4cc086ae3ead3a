"""An elastic Job (`nodes: 2:3`) on the test cluster: grown, shrunk and grown again with no `pulumi
up`, and every sample of each epoch trained once (the journey: elastic_journey.py)."""

from __future__ import annotations

import pytest

from elastic_journey import journey
from trainer import contract

pytestmark = pytest.mark.timeout(1500)


def test_an_elastic_world_grows_shrinks_and_grows_again_and_trains_every_sample_once(cluster, dev_stack):
    journey(cluster, dev_stack, contract.INDEXED_JOB)
