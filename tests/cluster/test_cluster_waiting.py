"""Why a world waits, caused on a real cluster and read where a user looks: the status view the
stack's `statusCommand` output prints. An image the node cannot pull (there is no registry), and a
claim whose StorageClass does not exist. (A queue's reasons: test_cluster_kueue.py and
test_cluster_volcano.py; a pod too large for the node: test_cluster_fit.py.)

The pods run the pause image in place of the trainer. On the controllers' cluster.
"""

from __future__ import annotations

import pytest

from cluster_testing import status_view, wait_for

pytestmark = pytest.mark.timeout(600)
ABSENT_IMAGE = "localhost/ddp-infra/absent:1"


def test_an_image_the_node_cannot_pull_is_named_with_the_pull_error(controllers_cluster, pause_stack):
    pause_stack.up(image__name=ABSENT_IMAGE)

    def said() -> str | None:
        status = status_view(controllers_cluster, pause_stack.outputs["statusCommand"])
        return status if "trainer ErrImagePull" in status or "trainer ImagePullBackOff" in status else None

    status = wait_for(said, 120, "the status view to show the failed pull")
    assert "waiting: pod 0 (" in status and "waiting: pod 1 (" in status, status
    assert ABSENT_IMAGE in status, status


def test_a_claim_that_cannot_bind_is_named_with_its_storage_class_error(controllers_cluster, pause_stack):
    pause_stack.up(storage__outputs__storageClass="absent-class")

    def said() -> str | None:
        status = status_view(controllers_cluster, pause_stack.outputs["statusCommand"])
        return status if "waiting: claim outputs-pvc Pending: ProvisioningFailed: " in status else None

    status = wait_for(said, 120, "the status view to say why the outputs claim does not bind")
    assert 'storageclass.storage.k8s.io "absent-class" not found' in status, status
    assert "not scheduled: " in status and "PersistentVolumeClaim" in status, status  # the scheduler's word, beside it
