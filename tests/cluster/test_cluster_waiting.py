"""Why a world waits, caused on a real cluster and read where a user looks: the line `pulumi up` ends
with (and the `worldState` output), and the status view the stack's `statusCommand` output prints.
An image the node cannot pull (there is no registry), a claim whose StorageClass does not exist,
pods the Job controller cannot create (an admission policy that denies them, a ResourceQuota, the
namespace's Pod Security level).
(A queue's reasons: test_cluster_kueue.py and test_cluster_volcano.py; a pod too large for the
node: test_cluster_fit.py.)

The pods run the pause image in place of the trainer. On the controllers' cluster.
"""

from __future__ import annotations

import pytest

from cluster_testing import NAMESPACE, WORKLOAD, apply, status_view, wait_for

pytestmark = pytest.mark.timeout(600)
ABSENT_IMAGE = "localhost/ddp-infra/absent:1"


def test_an_image_the_node_cannot_pull_is_named_with_the_pull_error(controllers_cluster, pause_stack):
    pause_stack.up(image__name=ABSENT_IMAGE, workload__waitFor="running", workload__waitSeconds="20")
    said = "warning: world: not running after 20 s: image not pulled: trainer "
    assert said in pause_stack.up_output and ABSENT_IMAGE in pause_stack.up_output, pause_stack.up_output
    assert pause_stack.outputs["worldState"].startswith("image not pulled: trainer ")

    def said() -> str | None:
        status = status_view(controllers_cluster, pause_stack.outputs["statusCommand"])
        return status if "trainer ErrImagePull" in status or "trainer ImagePullBackOff" in status else None

    status = wait_for(said, 120, "the status view to show the failed pull")
    assert "waiting: pod 0 (" in status and "waiting: pod 1 (" in status, status
    assert ABSENT_IMAGE in status, status


def test_a_claim_that_cannot_bind_is_named_with_its_storage_class_error(controllers_cluster, pause_stack):
    pause_stack.up(storage__outputs__storageClass="absent-class", workload__waitSeconds="20")
    said = 'warning: world: not admitted after 20 s: claim pending: claim outputs-pvc Pending: ProvisioningFailed: storageclass.storage.k8s.io "absent-class" not found'
    assert said in pause_stack.up_output, pause_stack.up_output

    def said() -> str | None:
        status = status_view(controllers_cluster, pause_stack.outputs["statusCommand"])
        return status if "waiting: claim outputs-pvc Pending: ProvisioningFailed: " in status else None

    status = wait_for(said, 120, "the status view to say why the outputs claim does not bind")
    assert 'storageclass.storage.k8s.io "absent-class" not found' in status, status
    assert "not scheduled: " in status and "PersistentVolumeClaim" in status, status  # the scheduler's word, beside it


DENY = "ddp-infra-test-deny-trainers"


@pytest.fixture
def denying_policy(controllers_cluster):
    """A ValidatingAdmissionPolicy that denies the world's pods (not the rendezvous store's), as an
    admission webhook or a policy engine would; removed after the test."""
    match = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}
    apply(controllers_cluster, [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": DENY},
         "spec": {"failurePolicy": "Fail", "matchConstraints": match,
                  "validations": [{"expression": "false", "message": "training pods need a signed image"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": DENY},
         "spec": {"policyName": DENY, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                                     "objectSelector": {"matchLabels": {"app.kubernetes.io/instance": WORKLOAD}}}}},
    ])  # fmt: skip
    yield
    controllers_cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", DENY, "--ignore-not-found")


def test_pods_the_controller_cannot_create_are_named_with_its_event(controllers_cluster, denying_policy, pause_stack):
    """Denied by an admission policy, `up` ends saying so in the Job controller's words; then, the
    policy gone and a ResourceQuota in the namespace with room for one pod of the world, the replaced
    world's second pod is refused by the quota, which `up` and the status view say."""
    pause_stack.up(workload__waitSeconds="15")
    said = "warning: world: not admitted after 15 s: cannot create pods: "
    assert said in pause_stack.up_output and "training pods need a signed image" in pause_stack.up_output, pause_stack.up_output
    # two pods: the rendezvous store's, which the policy let in, and one of the world's
    apply(controllers_cluster, [{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "two-pods", "namespace": NAMESPACE},
                                 "spec": {"hard": {"pods": "2"}}}])  # fmt: skip
    controllers_cluster.kubectl("delete", "validatingadmissionpolicybinding", DENY)

    pause_stack.up(workload__waitSeconds="15", workload__backoffLimit="2")  # a changed spec: the world is replaced
    said = "warning: world: not admitted after 15 s: cannot create pods: "
    assert said in pause_stack.up_output and "exceeded quota: two-pods" in pause_stack.up_output, pause_stack.up_output
    status = status_view(controllers_cluster, pause_stack.outputs["statusCommand"])
    assert f"job {WORKLOAD}: running, 1 pod(s) of the world up" in status, status
    assert "waiting: cannot create pods: " in status and "exceeded quota: two-pods" in status, status


def test_pods_a_namespaces_pod_security_refuses_are_named_in_its_words(controllers_cluster, pause_stack):
    """A namespace the stack does not create (`namespace.create: false`) that enforces `restricted`,
    and a sidecar that adds a capability: the Job controller cannot create the world's pods, and `up`
    ends saying why, in the API server's words. (A privileged one the local cluster's API server
    refuses outright, as clusters that disallow privileged containers do.)"""
    cluster = controllers_cluster
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    sidecar = {"name": "shaper", "image": cluster.images["pause"], "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
    pause_stack.up(namespace__create="false", pod__sidecars=[sidecar], workload__waitSeconds="15")
    said = "warning: world: not admitted after 15 s: cannot create pods: "
    refused = ('violates PodSecurity "restricted:latest": unrestricted capabilities (', 'container "shaper" must not include "NET_ADMIN"')
    assert said in pause_stack.up_output and all(words in pause_stack.up_output for words in refused), pause_stack.up_output
