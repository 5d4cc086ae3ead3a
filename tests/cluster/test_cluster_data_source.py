"""The datasets claim filled from `storage.datasets.source` on the cluster: a file server inside it
(a pod of the trainer's image serving a corpus archive), the dev world fetching it once in its
`fetch-data` init containers and training a language model on it, an `up` that starts new pods
fetching nothing, and a source whose SHA-256 differs, then one that cannot be reached, failing
the world with that reason in the status view while the claim keeps the corpus. Then an object
store inside it (versitygw, the toolchain's, in a pod) serving the corpus under a prefix: the
stack's secretEnv credentials refused with a wrong secret, saying so, then accepted."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from pulumi_project import toolchain_bin_dir
from trainer_testing import with_option, write_corpus

from trainer.fetch import tree_digest

from cluster_testing import (
    NAMESPACE, TEST_DOMAIN, all_logs, apply, claim_path, cluster_state, get, job_condition, pods, running, status_view, wait_for, world_pods,
)  # fmt: skip

pytestmark = pytest.mark.timeout(900)

FILES = "files"  # the file server's namespace, Service and pod
OBJECTS, OBJECTS_PORT = "objects", 7070  # the object store's Service and pod, in that namespace
ACCESS, SECRET = "corpus-reader", "corpus-reader-secret"
LM_RUN = ["-m", "trainer.train", "lm", "--data-dir", "/data/corpus", "--epochs", "1", "--batch", "4", "--seq-len", "32",
          "--d-model", "32", "--n-layer", "1", "--n-head", "2", "--lr", "3e-3", "--log-every", "2"]  # fmt: skip


def corpus_archive(tmp_path) -> bytes:
    write_corpus(tmp_path / "corpus")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("train.jsonl", "val.jsonl"):
            tar.add(tmp_path / "corpus" / name, arcname=name)
    return buffer.getvalue()


def file_server(image: str, archive: bytes) -> list[dict]:
    labels = {"app": FILES}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FILES}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": FILES, "namespace": FILES},
         "binaryData": {"corpus.tar.gz": base64.b64encode(archive).decode()}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": FILES, "namespace": FILES, "labels": labels},
         "spec": {"containers": [{"name": "http", "image": image, "imagePullPolicy": "IfNotPresent",
                                  "command": ["python", "-m", "http.server", "8080", "--directory", "/srv"],
                                  "volumeMounts": [{"name": "files", "mountPath": "/srv"}]}],
                  "volumes": [{"name": "files", "configMap": {"name": FILES}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": FILES, "namespace": FILES},
         "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]}},
    ]  # fmt: skip


def object_store(image: str, buckets: Path) -> list[dict]:
    """versitygw's posix backend on `buckets` (its subdirectories are the buckets), the toolchain's
    static binary mounted from the node, with one account's SigV4 credentials."""
    binary = (toolchain_bin_dir() / "versitygw").resolve()
    labels = {"app": OBJECTS}
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": OBJECTS, "namespace": FILES, "labels": labels},
         "spec": {"securityContext": {"runAsUser": 0},  # the test's directories are root's
                  "containers": [{"name": "s3", "image": image, "imagePullPolicy": "IfNotPresent",
                                  "command": ["/versitygw/versitygw", "--access", ACCESS, "--secret", SECRET,
                                              "--port", f":{OBJECTS_PORT}", "posix", "/buckets"],
                                  "volumeMounts": [{"name": "binary", "mountPath": "/versitygw", "readOnly": True},
                                                   {"name": "buckets", "mountPath": "/buckets"}]}],
                  "volumes": [{"name": "binary", "hostPath": {"path": str(binary.parent), "type": "Directory"}},
                              {"name": "buckets", "hostPath": {"path": str(buckets), "type": "Directory"}}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": OBJECTS, "namespace": FILES},
         "spec": {"selector": labels, "ports": [{"port": OBJECTS_PORT, "targetPort": OBJECTS_PORT}]}},
    ]  # fmt: skip


def fetch_said(cluster, failed: bool = False) -> dict[str, list[str]]:
    """What each pod's fetch-data init container said, by pod (with `failed`, failed pods' too)."""
    chosen = pods(cluster, NAMESPACE).values() if failed else world_pods(cluster).values()
    return {pod["metadata"]["name"]: cluster.kubectl("logs", pod["metadata"]["name"], "-n", NAMESPACE, "-c", "fetch-data", check=False).stdout.splitlines()
            for pod in chosen if pod["spec"].get("initContainers")}  # fmt: skip


def fetch_lines(cluster, failed: bool = False) -> list[str]:
    return [line for said in fetch_said(cluster, failed).values() for line in said]


def fetched_once(cluster, source: str, into: str) -> None:
    """The pods of the world share the claim: one fetch of `source` landed in `into`, and the pod
    that fetched it is the one its record names. Counted over the Job's failed pods too: a pod that
    fetched and then failed (its trainer, beside the suite's other workers) is replaced by one that
    finds the data present. The pod that fetched may be gone: an `up` that fixes the stack's Secret
    updates it before it replaces the failed world's Job, which meanwhile starts pods that read it
    (the Secret alone fixed under such a Job, its next pod fetched 18 s later), and that pod's log
    goes with its Job: in CI, every pod left said `present`."""
    fetched = claim_path(cluster, NAMESPACE, "datasets-pvc") / ".fetched"
    record = json.loads((fetched / f"{into}.json").read_text())
    assert record["url"] == source and not list(fetched.glob(f"{into}.replaced-*")), (record, sorted(fetched.iterdir()))
    said = {pod: sorted(line.split(": ", 1)[1].split(" (")[0] for line in lines) for pod, lines in fetch_said(cluster, failed=True).items()}
    assert all(lines and set(lines) <= {f"fetched {source}", "present"} for lines in said.values()) and len(said) >= 2, said
    fetchers = [pod for pod, lines in said.items() if f"fetched {source}" in lines]
    assert fetchers == ([record["pod"]] if record["pod"] in said else []), (record, said)


def gets(cluster) -> int:
    """The file server's GETs of the corpus (http.server logs each request)."""
    return cluster.kubectl("logs", FILES, "-n", FILES).stdout.count('"GET /corpus.tar.gz ')


def says_why_the_world_fails(cluster, command: str) -> str:
    """The status view once it names the failed fetch (the last one seen, if it never does)."""
    seen: list[str] = []

    def naming_the_fetch() -> str | None:
        seen.append(status_view(cluster, command))
        return seen[-1] if "fetch-data failed (exit 1)" in seen[-1] else None

    try:
        return wait_for(naming_the_fetch, 180, "the status view to say why the world fails")
    except AssertionError as error:
        job = json.dumps(get(cluster, "job", "trainer", NAMESPACE), indent=1)
        raise AssertionError(f"{error}\n{seen[-1] if seen else ''}\n{fetch_lines(cluster, failed=True)}\n{job}\n{cluster_state(cluster)}") from None


def test_a_source_fills_the_claim_once_and_a_bad_one_fails_the_world_with_its_reason(cluster, dev_image, dev_stack, tmp_path):
    archive = corpus_archive(tmp_path)
    sha256 = hashlib.sha256(archive).hexdigest()
    url = f"http://{FILES}.{FILES}.svc.{TEST_DOMAIN}:8080/corpus.tar.gz"
    buckets = tmp_path / "buckets"
    shutil.copytree(tmp_path / "corpus", buckets / "corpora" / "web" / "v1")  # the corpus again, as objects under corpora/web/v1/
    apply(cluster, file_server(dev_image, archive) + object_store(dev_image, buckets))
    try:
        wait_for(lambda: running(get(cluster, "pod", FILES, FILES)), 120, "the file server to run")
        dev_stack.up(run__args=LM_RUN, storage__datasets__source={"url": url, "sha256": sha256})
        ended = wait_for(lambda: job_condition(cluster), 600, "the Job to end", interval=3)
        assert ended == "Complete", f"{fetch_lines(cluster, failed=True)}\n{cluster_state(cluster)}\n" + "\n".join(
            all_logs(cluster, NAMESPACE, pod["metadata"]["name"])[-2000:] for pod in world_pods(cluster).values())
        fetched_once(cluster, url, "corpus")
        corpus = claim_path(cluster, NAMESPACE, "datasets-pvc") / "corpus"
        assert (corpus / "train.jsonl").read_bytes() == (tmp_path / "corpus" / "train.jsonl").read_bytes()
        assert "[DONE]" in all_logs(cluster, NAMESPACE, world_pods(cluster)[0]["metadata"]["name"])
        assert gets(cluster) == 1

        # New pods (one more epoch replaces the Job) find the data there: nothing is fetched again.
        dev_stack.up(run__args=with_option(LM_RUN, "--epochs", "2"), storage__datasets__source={"url": url, "sha256": sha256})
        assert wait_for(lambda: job_condition(cluster), 600, "the longer run's Job to end", interval=3) == "Complete"
        assert [line.split(": ", 1)[1].split(" (")[0] for line in fetch_lines(cluster)] == ["present", "present"]
        assert gets(cluster) == 1

        for source, reason in [
            ({"url": url, "sha256": "0" * 64}, f"its sha256 is {sha256}, not {'0' * 64} as the stack says"),
            # (a new version: the same SHA-256 from anywhere is the data the claim holds, not fetched again)
            ({"url": f"http://no-such-{FILES}.{FILES}.svc.{TEST_DOMAIN}:8080/corpus-v2.tar.gz", "sha256": "1" * 64}, "cannot fetch it ("),
        ]:
            dev_stack.up(run__args=LM_RUN, storage__datasets__source=source)
            status = says_why_the_world_fails(cluster, dev_stack.outputs["statusCommand"])
            assert reason in status, status
            # nothing on the claim changed
            assert (corpus / "train.jsonl").read_bytes() == (tmp_path / "corpus" / "train.jsonl").read_bytes()
            assert json.loads((corpus.parent / ".fetched" / "corpus.json").read_text())["sha256"] == sha256

        # An object store's prefix, read with the credentials of the stack's secretEnv.
        wait_for(lambda: running(get(cluster, "pod", OBJECTS, FILES)), 120, "the object store to run")
        prefix = {"url": "s3://corpora/web/v1/", "sha256": tree_digest(tmp_path / "corpus"), "into": "corpus-s3",
                  "endpoint": f"http://{OBJECTS}.{FILES}.svc.{TEST_DOMAIN}:{OBJECTS_PORT}"}  # fmt: skip
        from_prefix = with_option(LM_RUN, "--data-dir", "/data/corpus-s3")
        for secret, reason in [("not-" + SECRET, "cannot fetch it (SignatureDoesNotMatch: "), (SECRET, None)]:
            keys = {"AWS_ACCESS_KEY_ID": dev_stack.encrypted(ACCESS), "AWS_SECRET_ACCESS_KEY": dev_stack.encrypted(secret)}
            dev_stack.up(run__args=from_prefix, storage__datasets__source=prefix, secretEnv=keys)
            if reason:
                status = says_why_the_world_fails(cluster, dev_stack.outputs["statusCommand"])
                assert reason in status, status
                assert not (corpus.parent / "corpus-s3").exists()
        assert wait_for(lambda: job_condition(cluster), 600, "the Job on the prefix's corpus to end", interval=3) == "Complete"
        fetched_once(cluster, prefix["url"], prefix["into"])
        for name in ("train.jsonl", "val.jsonl"):  # (the trainer added its token cache beside them)
            assert (corpus.parent / "corpus-s3" / name).read_bytes() == (tmp_path / "corpus" / name).read_bytes(), name
        assert "[DONE]" in all_logs(cluster, NAMESPACE, world_pods(cluster)[0]["metadata"]["name"])
    finally:
        cluster.kubectl("delete", "namespace", FILES, "--wait=false")
