"""Malformed configs: each is refused with one error naming the key, the value and what is
allowed, and nothing is registered (so a bad `pulumi preview` or `pulumi up` creates nothing)."""

from __future__ import annotations

import pulumi
import pytest

import infra_harness as harness

DELETE = harness.DELETE

# (test id, {config path: value}, the full key the error must name, text of the value given)
MALFORMED = [
    ("nodes-zero", {"nodes": "0"}, "ddp-infra:nodes", "'0'"),
    ("nodes-too-many", {"nodes": "1025"}, "ddp-infra:nodes", "'1025'"),
    ("nodes-not-a-number", {"nodes": "sixty-four"}, "ddp-infra:nodes", "'sixty-four'"),
    ("nodes-fraction", {"nodes": "4.5"}, "ddp-infra:nodes", "'4.5'"),
    ("gpus-negative", {"gpusPerNode": "-1"}, "ddp-infra:gpusPerNode", "'-1'"),
    ("gpus-too-many", {"gpusPerNode": "17"}, "ddp-infra:gpusPerNode", "'17'"),
    ("procs-differ-from-gpus", {"gpusPerNode": "8", "procsPerNode": "2"}, "ddp-infra:procsPerNode", "2"),
    ("image-missing", {"image": DELETE}, "ddp-infra:image", "(not set)"),
    ("image-not-an-object", {"image": "ddp-trainer:dev"}, "ddp-infra:image", "'ddp-trainer:dev'"),
    ("image-name-empty", {"image.name": ""}, "ddp-infra:image.name", "''"),
    ("pull-policy", {"image.pullPolicy": "Sometimes"}, "ddp-infra:image.pullPolicy", "'Sometimes'"),
    ("pull-secret-name", {"image.pullSecrets": ["Registry_Creds"]}, "ddp-infra:image.pullSecrets[0]", "'Registry_Creds'"),
    ("namespace-name", {"namespace.name": "Team_A"}, "ddp-infra:namespace.name", "'Team_A'"),
    ("namespace-create", {"namespace.create": "maybe"}, "ddp-infra:namespace.create", "'maybe'"),
    ("claim-size", {"storage.outputs.size": "lots"}, "ddp-infra:storage.outputs.size", "'lots'"),
    ("access-mode", {"storage.outputs.accessMode": "RWX"}, "ddp-infra:storage.outputs.accessMode", "'RWX'"),
    ("storage-class", {"storage.outputs.storageClass": "Fast SSD"}, "ddp-infra:storage.outputs.storageClass", "'Fast SSD'"),
    ("size-on-existing-claim", {"storage.datasets.create": "false"}, "ddp-infra:storage.datasets.size", "'5Gi'"),
    ("models-without-size", {"storage.models": {}}, "ddp-infra:storage.models.size", "(not set)"),
    ("one-pod-claim-many-nodes", {"storage.outputs.accessMode": "ReadWriteOncePod", "nodes": "4"},
     "ddp-infra:storage.outputs.accessMode", "'ReadWriteOncePod'"),
    ("unknown-nested-key", {"storage.outputs.sise": "1Gi"}, "ddp-infra:storage.outputs.sise", "'1Gi'"),
    ("data-source-url", {"storage.datasets.source": {"url": "ftp://files/corpus.tar.gz", "sha256": "a" * 64}},
     "ddp-infra:storage.datasets.source.url", "'ftp://files/corpus.tar.gz'"),
    ("data-source-sha256", {"storage.datasets.source": {"url": "https://files/corpus.tar.gz", "sha256": "ABC"}},
     "ddp-infra:storage.datasets.source.sha256", "'ABC'"),
    ("data-source-without-sha256", {"storage.datasets.source": {"url": "https://files/corpus.tar.gz"}},
     "ddp-infra:storage.datasets.source.sha256", "(not set)"),
    ("data-source-into", {"storage.datasets.source": {"url": "https://files/c.tar", "sha256": "a" * 64, "into": "../etc"}},
     "ddp-infra:storage.datasets.source.into", "'../etc'"),
    ("data-source-bucket", {"storage.datasets.source": {"url": "s3://Corpus_Bucket/v1/", "sha256": "a" * 64}},
     "ddp-infra:storage.datasets.source.url", "'s3://Corpus_Bucket/v1/'"),
    ("data-source-endpoint-for-http", {"storage.datasets.source": {"url": "https://files/c.tar", "sha256": "a" * 64,
                                                                   "endpoint": "http://minio:9000"}},
     "ddp-infra:storage.datasets.source.endpoint", "'http://minio:9000'"),
    ("data-source-endpoint-path", {"storage.datasets.source": {"url": "s3://corpus/v1/", "sha256": "a" * 64,
                                                               "endpoint": "http://minio:9000/bucket"}},
     "ddp-infra:storage.datasets.source.endpoint", "'http://minio:9000/bucket'"),
    ("data-source-on-a-read-only-claim", {"storage.datasets.source": {"url": "https://files/c.tar", "sha256": "a" * 64},
                                          "storage.datasets.accessMode": "ReadOnlyMany"},
     "ddp-infra:storage.datasets.accessMode", "'ReadOnlyMany'"),
    ("init-container-named-as-the-programs", {"pod.initContainers": [{"name": "fetch-data", "image": "busybox"}]},
     "ddp-infra:pod.initContainers[0].name", "'fetch-data'"),
    ("request-above-limit", {"resources.requests.memory": "16Gi"}, "ddp-infra:resources.requests.memory", "'16Gi'"),
    ("cpu-quantity", {"resources.limits.cpu": "two"}, "ddp-infra:resources.limits.cpu", "'two'"),
    ("gpu-as-extended", {"resources.extended": {"nvidia.com/gpu": "1"}}, "ddp-infra:resources.extended", "nvidia.com/gpu"),
    ("shm-above-memory", {"shmSize": "8Gi"}, "ddp-infra:shmSize", "'8Gi'"),
    ("shm-quantity", {"shmSize": "big"}, "ddp-infra:shmSize", "'big'"),
    ("nccl-debug", {"network.ncclDebug": "LOUD"}, "ddp-infra:network.ncclDebug", "'LOUD'"),
    ("socket-ifname", {"network.socketIfname": "eth0 eth1"}, "ddp-infra:network.socketIfname", "'eth0 eth1'"),
    ("ib-hca-without-infiniband", {"network.ibHca": "mlx5"}, "ddp-infra:network.ibHca", "'mlx5'"),
    ("ib-gid-without-infiniband", {"network.ibGidIndex": "3"}, "ddp-infra:network.ibGidIndex", "3"),
    ("ib-gid-range", {"network": {"infiniband": True, "ibGidIndex": "300"}}, "ddp-infra:network.ibGidIndex", "'300'"),
    ("ib-hca-list", {"network": {"infiniband": True, "ibHca": "mlx5_0 mlx5_1"}}, "ddp-infra:network.ibHca", "'mlx5_0 mlx5_1'"),
    ("infiniband-without-rdma", {"network": {"infiniband": True, "rdmaResources": {}}}, "ddp-infra:network.rdmaResources", "{}"),
    ("rdma-count-zero", {"network": {"infiniband": True, "rdmaResources": {"rdma/hca_shared_devices_a": "0"}}},
     'ddp-infra:network.rdmaResources["rdma/hca_shared_devices_a"]', "'0'"),
    ("rdma-resource-name", {"network": {"infiniband": True, "rdmaResources": {"rdma hca": 1}}},
     'ddp-infra:network.rdmaResources["rdma hca"]', "'rdma hca'"),
    ("rdma-also-extended", {"network": {"infiniband": True}, "resources.extended": {"rdma/hca_shared_devices_a": "1"}},
     'ddp-infra:resources.extended["rdma/hca_shared_devices_a"]', "'1'"),
    ("secondary-network-name", {"network.secondaryNetworks": ["IB Rail"]}, "ddp-infra:network.secondaryNetworks[0]", "'IB Rail'"),
    ("secondary-network-twice", {"network.secondaryNetworks": ["ib-rail-0"], "annotations": {"k8s.v1.cni.cncf.io/networks": "x"}},
     'ddp-infra:annotations["k8s.v1.cni.cncf.io/networks"]', "'x'"),
    ("runtime-class", {"pod.runtimeClassName": "Nvidia Runtime"}, "ddp-infra:pod.runtimeClassName", "'Nvidia Runtime'"),
    ("volume-two-sources", {"pod.volumes": [{"name": "x", "emptyDir": {}, "secret": {"secretName": "s"}}]},
     "ddp-infra:pod.volumes[0].secret", "emptyDir"),
    ("volume-unknown-source", {"pod.volumes": [{"name": "x", "emptyDirr": {}}]}, "ddp-infra:pod.volumes[0].emptyDirr", "emptyDirr"),
    ("volume-programs-name", {"pod.volumes": [{"name": "dshm", "emptyDir": {}}]}, "ddp-infra:pod.volumes[0].name", "'dshm'"),
    ("mount-unknown-volume", {"pod.volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}, "ddp-infra:pod.volumeMounts[0].name", "'logs'"),
    ("mount-over-outputs", {"pod.volumes": [{"name": "logs", "emptyDir": {}}], "pod.volumeMounts": [{"name": "logs", "mountPath": "/out/"}]},
     "ddp-infra:pod.volumeMounts[0].mountPath", "'/out/'"),
    ("mount-relative", {"pod.volumeMounts": [{"name": "tmp", "mountPath": "logs"}]}, "ddp-infra:pod.volumeMounts[0].mountPath", "'logs'"),
    ("sidecar-typo", {"pod.sidecars": [{"name": "shipper", "image": "fluent-bit:3", "comand": ["x"]}]},
     "ddp-infra:pod.sidecars[0].comand", '["x"]'),
    ("sidecar-without-image", {"pod.sidecars": [{"name": "shipper"}]}, "ddp-infra:pod.sidecars[0].image", "(not set)"),
    ("sidecar-named-trainer", {"pod.sidecars": [{"name": "trainer", "image": "x"}]}, "ddp-infra:pod.sidecars[0].name", "'trainer'"),
    ("init-and-sidecar-same-name", {"pod.initContainers": [{"name": "a", "image": "x"}], "pod.sidecars": [{"name": "a", "image": "y"}]},
     "ddp-infra:pod.sidecars[0].name", "'a'"),
    ("sidecar-restart-policy", {"pod.sidecars": [{"name": "a", "image": "x", "restartPolicy": "Never"}]},
     "ddp-infra:pod.sidecars[0].restartPolicy", "'Never'"),
    ("read-only-root", {"pod.readOnlyRootFilesystem": "maybe"}, "ddp-infra:pod.readOnlyRootFilesystem", "'maybe'"),
    ("patch-trainer-env", {"pod.templatePatch": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NNODES", "value": "9"}]}]}}},
     "ddp-infra:pod.templatePatch.spec.containers[0].env", "NNODES"),
    ("patch-trainer-command", {"pod.templatePatch": {"spec": {"containers": [{"name": "trainer", "command": ["bash"]}]}}},
     "ddp-infra:pod.templatePatch.spec.containers[0].command", '["bash"]'),
    ("patch-selector-label", {"pod.templatePatch": {"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}}},
     'ddp-infra:pod.templatePatch.metadata.labels["app.kubernetes.io/instance"]', "'other'"),
    ("patch-subdomain", {"pod.templatePatch": {"spec": {"subdomain": "elsewhere"}}}, "ddp-infra:pod.templatePatch.spec.subdomain", "'elsewhere'"),
    ("patch-has-a-key", {"pod.templatePatch": {"spec": {"runtimeClassName": "nvidia"}}},
     "ddp-infra:pod.templatePatch.spec.runtimeClassName", "'nvidia'"),
    ("patch-extra-container", {"pod.templatePatch": {"spec": {"containers": [{"name": "shipper", "image": "x"}]}}},
     "ddp-infra:pod.templatePatch.spec.containers[0]", "shipper"),
    ("patch-read-only-root", {"pod.templatePatch": {"spec": {"containers": [{"name": "trainer", "securityContext": {"readOnlyRootFilesystem": False}}]}}},
     "ddp-infra:pod.templatePatch.spec.containers[0].securityContext.readOnlyRootFilesystem", "False"),
    ("patch-directive", {"pod.templatePatch": {"spec": {"$patch": "replace"}}}, 'ddp-infra:pod.templatePatch.spec["$patch"]', "'replace'"),
    ("patch-not-the-template", {"pod.templatePatch": {"kind": "Pod"}}, "ddp-infra:pod.templatePatch.kind", "'Pod'"),
    ("patch-spec-a-list", {"pod.templatePatch": {"spec": ["dnsPolicy"]}}, "ddp-infra:pod.templatePatch.spec", "dnsPolicy"),
    ("rdzv-port", {"rendezvous.port": "80"}, "ddp-infra:rendezvous.port", "'80'"),
    ("rdzv-backend", {"rendezvous.backend": "zmq"}, "ddp-infra:rendezvous.backend", "'zmq'"),
    ("etcd-without-endpoint", {"rendezvous.backend": "etcd-v2"}, "ddp-infra:rendezvous.endpoint", "(not set)"),
    ("join-timeout", {"rendezvous.joinTimeoutSeconds": "0"}, "ddp-infra:rendezvous.joinTimeoutSeconds", "'0'"),
    ("no-train-args", {"run.args": []}, "ddp-infra:run.args", "[]"),
    ("run-name-path", {"run.name": "../escape"}, "ddp-infra:run.name", "'../escape'"),
    ("workload-kind", {"workload.kind": "deployment"}, "ddp-infra:workload.kind", "'deployment'"),
    ("workload-name-long", {"workload.name": "t" * 53}, "ddp-infra:workload.name", "'ttt"),
    ("wait-for", {"workload.waitFor": "ready"}, "ddp-infra:workload.waitFor", "'ready'"),
    ("wait-seconds", {"workload.waitSeconds": "0"}, "ddp-infra:workload.waitSeconds", "'0'"),
    ("hang-floor-zero", {"workload.hangTimeout.floorSeconds": "0"}, "ddp-infra:workload.hangTimeout.floorSeconds", "'0'"),
    ("hang-ceiling-below-floor", {"workload.hangTimeout": {"floorSeconds": "60", "ceilingSeconds": "30"}},
     "ddp-infra:workload.hangTimeout.ceilingSeconds", "30"),
    ("hang-ceiling-negative", {"workload.hangTimeout.ceilingSeconds": "-1"}, "ddp-infra:workload.hangTimeout.ceilingSeconds", "'-1'"),
    ("hang-ceiling-not-an-integer", {"workload.hangTimeout.ceilingSeconds": "2m"},
     "ddp-infra:workload.hangTimeout.ceilingSeconds", "'2m'"),
    ("liveness-on-the-rendezvous-port", {"workload.liveness.port": "29500"}, "ddp-infra:workload.liveness.port", "29500"),
    ("liveness-negative", {"workload.liveness.seconds": "-1"}, "ddp-infra:workload.liveness.seconds", "'-1'"),
    ("toleration-exists-value", {"scheduling.tolerations": [{"operator": "Exists", "value": "x"}]},
     "ddp-infra:scheduling.tolerations[0].value", "'x'"),
    ("affinity-typo", {"scheduling.affinity": {"nodeAfinity": {}}}, "ddp-infra:scheduling.affinity", "nodeAfinity"),
    ("spread-rule", {"scheduling.topologySpread.whenUnsatisfiable": "Never"},
     "ddp-infra:scheduling.topologySpread.whenUnsatisfiable", "'Never'"),
    ("reserved-label", {"labels": {"app.kubernetes.io/name": "x"}}, 'ddp-infra:labels["app.kubernetes.io/name"]', "'x'"),
    ("label-value", {"labels": {"team": "has space"}}, "ddp-infra:labels.team", "'has space'"),
    ("contract-env", {"env": {"NNODES": "3"}}, "ddp-infra:env.NNODES", "'3'"),
    ("env-name", {"env": {"1BAD": "x"}}, 'ddp-infra:env["1BAD"]', "'1BAD'"),
    ("object-not-json", {"labels": "{team: nlp"}, "ddp-infra:labels", "'{team: nlp'"),
    ("unknown-key", {"node": "4"}, "ddp-infra:node", "'4'"),
    ("workload-kind", {"workload.kind": "pytorchjob"}, "ddp-infra:workload.kind", "'pytorchjob'"),
    ("jobset-pod-names-too-long", {"workload.kind": "jobset", "workload.name": "a" * 50, "nodes": "64"},
     "ddp-infra:workload.name", "'" + "a" * 50 + "'"),
    ("jobset-name-starts-with-a-digit", {"workload.kind": "jobset", "workload.name": "7b-run"}, "ddp-infra:workload.name", "'7b-run'"),
    ("render-dir-empty", {"kubernetes.renderDir": ""}, "ddp-infra:kubernetes.renderDir", "''"),
    ("gang-scheduler", {"scheduling.gang.scheduler": "yunikorn"}, "ddp-infra:scheduling.gang.scheduler", "'yunikorn'"),
    ("kueue-without-queue", {"scheduling.gang.scheduler": "kueue"}, "ddp-infra:scheduling.gang.queue", "(not set)"),
    ("kueue-queue-name", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "Team A"},
     "ddp-infra:scheduling.gang.queue", "'Team A'"),
    ("kueue-with-a-statefulset", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a", "workload.kind": "statefulset"},
     "ddp-infra:scheduling.gang.scheduler", "'kueue'"),
    # an elastic world needs pods any subset of which can form it, and a scheduler that admits part of it
    ("elastic-statefulset", {"nodes": "2:4", "workload.kind": "statefulset"}, "ddp-infra:nodes", "'2:4'"),
    # and a scheduler that grows it as capacity appears: Kueue admits a world once, at a size it keeps
    ("elastic-jobset-with-kueue", {"nodes": "2:4", "workload.kind": "jobset", "scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a"},
     "ddp-infra:nodes", "'2:4'"),
    ("elastic-job-with-kueue", {"nodes": "2:4", "workload.kind": "job", "scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a"},
     "ddp-infra:nodes", "'2:4'"),
    ("elastic-store-on-pod-0", {"nodes": "2:4", "workload.kind": "job", "rendezvous.store": "pod-0"}, "ddp-infra:nodes", "'2:4'"),
    ("elastic-static", {"nodes": "2:4", "workload.kind": "jobset", "rendezvous.backend": "static"}, "ddp-infra:nodes", "'2:4'"),
    # spare pods take any pod's place: pods replaced one by one, a rendezvous that lives apart from pod 0
    ("spares-statefulset", {"workload.kind": "statefulset", "workload.sparePods": 1}, "ddp-infra:workload.sparePods", "1"),
    ("spares-store-on-pod-0", {"workload.kind": "job", "workload.sparePods": 2, "rendezvous.store": "pod-0"},
     "ddp-infra:workload.sparePods", "2"),
    ("spares-static", {"workload.kind": "jobset", "workload.sparePods": 1, "rendezvous.backend": "static"},
     "ddp-infra:workload.sparePods", "1"),
    # topology-aware placement is Kueue's
    ("topology-without-kueue", {"scheduling.topology": {"level": "cloud.example.com/rack"}}, "ddp-infra:scheduling.topology.level",
     "'cloud.example.com/rack'"),
    ("topology-with-volcano", {"scheduling.gang.scheduler": "volcano", "scheduling.topology": {"level": "rack", "mode": "preferred"}},
     "ddp-infra:scheduling.topology.level", "'rack'"),
    ("topology-mode", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a",
                       "scheduling.topology": {"level": "rack", "mode": "strict"}}, "ddp-infra:scheduling.topology.mode", "'strict'"),
    ("topology-level", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a",
                        "scheduling.topology": {"level": "Example.com/rack"}}, "ddp-infra:scheduling.topology.level", "'Example.com/rack'"),
    ("topology-slice-size-not-dividing-the-pods", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a", "nodes": 4,
                                                   "scheduling.topology": {"level": "block", "slice": {"level": "rack", "size": 3}}},
     "ddp-infra:scheduling.topology.slice.size", "3"),
    ("topology-slice-size-zero", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a",
                                  "scheduling.topology": {"level": "block", "slice": {"level": "rack", "size": 0}}},
     "ddp-infra:scheduling.topology.slice.size", "0"),
    ("topology-slice-level", {"scheduling.gang.scheduler": "kueue", "scheduling.gang.queue": "team-a",
                              "scheduling.topology": {"level": "block", "slice": {"level": "-rack", "size": 1}}},
     "ddp-infra:scheduling.topology.slice.level", "'-rack'"),
    ("queue-without-scheduler", {"scheduling.gang.queue": "team-a"}, "ddp-infra:scheduling.gang.queue", "'team-a'"),
    ("queue-with-kubernetes-scheduler", {"scheduling.gang.scheduler": "kubernetes", "scheduling.gang.queue": "team-a"},
     "ddp-infra:scheduling.gang.queue", "'team-a'"),
    ("topology-with-kubernetes-scheduler", {"scheduling.gang.scheduler": "kubernetes", "scheduling.topology": {"level": "rack"}},
     "ddp-infra:scheduling.topology.level", "'rack'"),
    # the Kubernetes scheduler's gang is the one the Job controller makes of all the Job's pods
    ("kubernetes-gang-with-a-statefulset", {"scheduling.gang.scheduler": "kubernetes", "workload.kind": "statefulset"},
     "ddp-infra:scheduling.gang.scheduler", "'kubernetes'"),
    ("workload-priority-with-volcano", {"scheduling.gang.scheduler": "volcano", "scheduling.gang.workloadPriorityClass": "high"},
     "ddp-infra:scheduling.gang.workloadPriorityClass", "'high'"),
    # What the API server or the kubelet would refuse (or, for a fraction of a byte, calls invalid)
    ("claim-size-zero", {"storage.outputs.size": "0"}, "ddp-infra:storage.outputs.size", "'0'"),
    ("claim-size-fraction-of-a-byte", {"storage.outputs.size": "1.5"}, "ddp-infra:storage.outputs.size", "'1.5'"),
    ("memory-fraction-of-a-byte", {"resources.limits.memory": "500m"}, "ddp-infra:resources.limits.memory", "'500m'"),
    ("shm-fraction-of-a-byte", {"shmSize": "100.5"}, "ddp-infra:shmSize", "'100.5'"),
    ("quantity-beyond-int64", {"resources.limits.cpu": "1e9999999"}, "ddp-infra:resources.limits.cpu", "'1e9999999'"),
    ("extended-fraction", {"resources.extended": {"example.com/fpga": "500m"}}, 'ddp-infra:resources.extended["example.com/fpga"]', "'500m'"),
    ("extended-without-domain", {"resources.extended": {"fpga": "1"}}, "ddp-infra:resources.extended.fpga", "'fpga'"),
    ("extended-in-kubernetes-io", {"resources.extended": {"fpga.kubernetes.io/x": "1"}},
     'ddp-infra:resources.extended["fpga.kubernetes.io/x"]', "'fpga.kubernetes.io/x'"),
    ("rdma-resource-without-domain", {"network": {"infiniband": True, "rdmaResources": {"hca": 1}}}, "ddp-infra:network.rdmaResources.hca", "'hca'"),
    ("workload-name-starts-with-a-digit", {"workload.name": "7b-run"}, "ddp-infra:workload.name", "'7b-run'"),
    ("label-key-prefix-too-long", {"labels": {"a" * 254 + "/team": "nlp"}}, 'ddp-infra:labels["' + "a" * 254 + '/team"]', "'aaa"),
    ("topology-key-prefix-too-long", {"scheduling.topologySpread.topologyKey": "a" * 254 + "/zone"},
     "ddp-infra:scheduling.topologySpread.topologyKey", "'aaa"),
    ("image-uppercase", {"image.name": "DDP-Trainer:dev"}, "ddp-infra:image.name", "'DDP-Trainer:dev'"),
    ("image-two-tags", {"image.name": "ddp-trainer:dev:2"}, "ddp-infra:image.name", "'ddp-trainer:dev:2'"),
    ("image-padded", {"image.name": " ddp-trainer:dev"}, "ddp-infra:image.name", "' ddp-trainer:dev'"),
    ("image-short-digest", {"image.name": "ddp-trainer@sha256:abc123"}, "ddp-infra:image.name", "'ddp-trainer@sha256:abc123'"),
    ("sidecar-image", {"pod.sidecars": [{"name": "shipper", "image": "Fluent-Bit:3"}]}, "ddp-infra:pod.sidecars[0].image", "'Fluent-Bit:3'"),
    ("init-container-image", {"pod.initContainers": [{"name": "fetch", "image": "busybox:1 2"}]},
     "ddp-infra:pod.initContainers[0].image", "'busybox:1 2'"),
    ("toleration-without-key", {"scheduling.tolerations": [{"value": "gpu", "effect": "NoSchedule"}]},
     "ddp-infra:scheduling.tolerations[0].key", "(not set)"),
    ("toleration-seconds-not-no-execute", {"scheduling.tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": "60"}]},
     "ddp-infra:scheduling.tolerations[0].effect", "'NoSchedule'"),
    ("toleration-seconds-without-effect", {"scheduling.tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": "60"}]},
     "ddp-infra:scheduling.tolerations[0].effect", "(not set)"),
    ("toleration-seconds-beyond-a-number", {"scheduling.tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": str(2**63)}]},
     "ddp-infra:scheduling.tolerations[0].tolerationSeconds", f"'{2**63}'"),
    ("annotations-too-large", {"annotations": {"note": "x" * 256 * 1024}}, "ddp-infra:annotations", '{"note": "xxx'),
    ("pod-deletion-cost", {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "cheap"}},
     'ddp-infra:annotations["controller.kubernetes.io/pod-deletion-cost"]', "'cheap'"),
    ("pod-deletion-cost-beyond-int32", {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "2147483648"}},
     'ddp-infra:annotations["controller.kubernetes.io/pod-deletion-cost"]', "'2147483648'"),
    ("seccomp-annotation", {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
     'ddp-infra:annotations["seccomp.security.alpha.kubernetes.io/pod"]', "'unconfined'"),
    ("apparmor-annotation", {"annotations": {"container.apparmor.security.beta.kubernetes.io/shipper": "runtime/default"}},
     'ddp-infra:annotations["container.apparmor.security.beta.kubernetes.io/shipper"]', "'runtime/default'"),
    ("tolerations-annotation", {"annotations": {"scheduler.alpha.kubernetes.io/tolerations": "[]"}},
     'ddp-infra:annotations["scheduler.alpha.kubernetes.io/tolerations"]', "'[]'"),
    ("mount-sub-path-absolute", {"pod.volumeMounts": [{"name": "tmp", "mountPath": "/logs", "subPath": "/var/log"}]},
     "ddp-infra:pod.volumeMounts[0].subPath", "'/var/log'"),
    ("mount-sub-path-up", {"pod.volumeMounts": [{"name": "tmp", "mountPath": "/logs", "subPath": "logs/../../etc"}]},
     "ddp-infra:pod.volumeMounts[0].subPath", "'logs/../../etc'"),
    ("workload-priority-class-too-long", {"scheduling.gang": {"scheduler": "kueue", "queue": "team-a", "workloadPriorityClass": "p" * 64}},
     "ddp-infra:scheduling.gang.workloadPriorityClass", "'ppp"),
    # Found by test_infra_config_vs_apiserver.py: accepted here, refused or warned about by the API server
    ("quantity-in-other-digits", {"resources.requests.cpu": "١"}, "ddp-infra:resources.requests.cpu", "'١'"),
    ("pod-deletion-cost-in-other-digits", {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-١"}},
     'ddp-infra:annotations["controller.kubernetes.io/pod-deletion-cost"]', "'-١'"),
    ("pull-secret-twice", {"image.pullSecrets": ["registry", "registry"]}, "ddp-infra:image.pullSecrets[1]", "'registry'"),
    ("mirror-pod-annotation", {"annotations": {"kubernetes.io/config.mirror": "x"}}, 'ddp-infra:annotations["kubernetes.io/config.mirror"]', "'x'"),
    ("critical-pod-annotation", {"annotations": {"scheduler.alpha.kubernetes.io/critical-pod": ""}},
     'ddp-infra:annotations["scheduler.alpha.kubernetes.io/critical-pod"]', "''"),
    ("sysctls-annotation", {"annotations": {"security.alpha.kubernetes.io/sysctls": "net.core.somaxconn=1024"}},
     'ddp-infra:annotations["security.alpha.kubernetes.io/sysctls"]', "'net.core.somaxconn=1024'"),
    ("deprecated-node-label", {"scheduling.nodeSelector": {"beta.kubernetes.io/arch": "amd64"}},
     'ddp-infra:scheduling.nodeSelector["beta.kubernetes.io/arch"]', "'beta.kubernetes.io/arch'"),
    ("deprecated-topology-key", {"scheduling.topologySpread.topologyKey": "failure-domain.beta.kubernetes.io/zone"},
     "ddp-infra:scheduling.topologySpread.topologyKey", "'failure-domain.beta.kubernetes.io/zone'"),
    ("job-controller-label", {"labels": {"batch.kubernetes.io/job-name": "other"}}, 'ddp-infra:labels["batch.kubernetes.io/job-name"]', "'other'"),
    ("job-controller-legacy-label", {"labels": {"controller-uid": "x"}}, "ddp-infra:labels.controller-uid", "'x'"),
    ("patch-job-controller-label", {"pod.templatePatch": {"metadata": {"labels": {"job-name": "other"}}}},
     "ddp-infra:pod.templatePatch.metadata.labels.job-name", "'other'"),
    ("mount-over-outputs-by-another-path", {"pod.volumeMounts": [{"name": "tmp", "mountPath": "/logs/../out"}]},
     "ddp-infra:pod.volumeMounts[0].mountPath", "'/logs/../out'"),
]


# Values at the edge of what Kubernetes takes, each accepted (test_infra_real_apiserver.py sends the
# objects made of them to a real API server too).
AT_THE_EDGE = {
    "namespace.name": "n" * 63,
    "workload.name": "w" * 52,
    "image.name": "registry.example.com:5000/team/ddp-trainer:v1.2@sha256:" + "a" * 64,
    "storage.outputs.claimName": "c" * 253,
    "storage.outputs.storageClass": "s" * 253,
    "storage.outputs.size": "1.5Gi",
    "resources": {"requests": {"cpu": "250m", "memory": "1.5Gi"}, "limits": {"cpu": "0.5", "memory": "1E"},
                  "extended": {"e" * 244 + "/" + "f" * 63: "1k"}},
    "shmSize": "1.5Mi",
    "labels": {"p" * 253 + "/" + "k" * 63: "v" * 63},
    "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-2147483648"},
    "scheduling.tolerations": [{"operator": "Exists"}, {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**53 - 1}],
    "scheduling.priorityClassName": "p" * 253,
    "scheduling.gang": {"scheduler": "kueue", "queue": "q" * 63, "workloadPriorityClass": "w" * 61 + ".p"},
    "pod.runtimeClassName": "r" * 253,
    "pod.volumeMounts": [{"name": "tmp", "mountPath": "/logs", "subPath": "..logs/rank-0"}],
    "secretEnv": {"S" * 253: "a-secret-value"},
}  # fmt: skip


def malformed(changes: dict) -> dict:
    values = harness.stack_file_config("dev")
    for path, value in changes.items():
        values = harness.with_path(values, path, value)
    return values


@pytest.mark.parametrize("changes, key, given", [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
@pulumi.runtime.test
def test_malformed_config_is_refused_before_anything_is_registered(changes, key, given):
    evaluation = harness.evaluate(malformed(changes))
    assert evaluation.error is not None, "the config was accepted"
    assert evaluation.registered == []
    lines = [line.strip() for line in str(evaluation.error).splitlines()[1:]]
    line = next((line for line in lines if line.startswith(f"{key}:")), None)
    assert line, f"no line for {key} in:\n{evaluation.error}"
    assert given in line
    assert "; allowed: " in line and not line.endswith("allowed: ")


@pulumi.runtime.test
def test_every_problem_is_reported_at_once():
    changes = {"nodes": "0", "image.pullPolicy": "Sometimes", "shmSize": "big", "rendezvous.port": "80"}
    evaluation = harness.evaluate(malformed(changes))
    assert evaluation.registered == []
    assert {problem.key for problem in evaluation.error.problems} == {
        "ddp-infra:nodes", "ddp-infra:image.pullPolicy", "ddp-infra:shmSize", "ddp-infra:rendezvous.port",
    }


@pulumi.runtime.test
def test_the_cli_string_form_of_numbers_and_booleans_is_accepted():
    values = malformed({"nodes": "64", "workload.waitSeconds": "300", "namespace.create": "false"})
    evaluation = harness.evaluate(values)
    assert evaluation.error is None, str(evaluation.error)
    assert evaluation.outputs["nodes"] == 64
    assert not evaluation.of_type("kubernetes:core/v1:Namespace")


@pulumi.runtime.test
def test_an_unknown_key_is_answered_with_every_key_a_stack_may_set():
    """hfToken included: it is read apart from the others (as a secret), but it is a key all the same."""
    from ddp_infra.config import StackConfig

    evaluation = harness.evaluate(malformed({"node": "4"}))
    (line,) = [str(p) for p in evaluation.error.problems if p.key == "ddp-infra:node"]
    listed = set(line.split("allowed: a known key: ", 1)[1].split(", "))
    assert listed == {field.alias for field in StackConfig.model_fields.values()}, line


@pytest.mark.parametrize("key", ["workload.waitForReady", "workload.liveness.period"])
@pulumi.runtime.test
def test_a_key_its_section_lacks_is_answered_with_the_keys_it_has(key):
    """A stack file written for an earlier release (workload.waitForReady, now workload.waitFor) learns what to write instead."""
    (problem,) = harness.evaluate(malformed({key: "true"})).error.problems
    section, _, _ = key.rpartition(".")
    assert problem.key == f"ddp-infra:{key}"
    assert problem.allowed.startswith(f"a key of ddp-infra:{section}: "), problem.allowed
    keys = problem.allowed.split(": ", 1)[1].split(", ")
    assert ("waitFor" in keys) == (section == "workload") and ("seconds" in keys) == (section == "workload.liveness"), keys


NODES = "a number of pods from 1 to 1024, or a range MIN:MAX of them with MIN < MAX for an elastic world (e.g. 64 or 32:64)"


@pytest.mark.parametrize("key, value, allowed", [
    ("nodes", 'abc', NODES),
    ("nodes", '0', NODES),
    ("nodes", '4.5', NODES),
    ("nodes", '1025', NODES),
    ("nodes", '4:2', NODES),
    ("nodes", '2:2', NODES),
    ("nodes", '0:3', NODES),
    ("nodes", '2:1025', NODES),
    ("nodes", '2:', NODES),
    ("nodes", '2-4', NODES),
    ("nodes", True, NODES),
    ("rendezvous.port", "80", "an integer from 1024 to 65535"),
    ("workload.hangTimeout.floorSeconds", "0", "an integer from 5 to 3600"),
    ("workload.hangTimeout", {"floorSeconds": "60", "ceilingSeconds": "30"}, "0 (off) or an integer from floorSeconds (60) to 86400"),
    ("scheduling.tolerations", [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -1}], "an integer from 0 to 9007199254740991"),
])  # fmt: skip
@pulumi.runtime.test
def test_an_integer_out_of_range_or_not_a_number_is_answered_with_the_range(key, value, allowed):
    evaluation = harness.evaluate(malformed({key: value}))
    (problem,) = evaluation.error.problems
    assert problem.allowed == allowed, str(problem)


@pytest.mark.parametrize("key, value, instead", [
    ("scheduling.nodeSelector", {"failure-domain.beta.kubernetes.io/zone": "a"}, "topology.kubernetes.io/zone"),
    ("scheduling.topologySpread.topologyKey", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"),
])  # fmt: skip
def test_a_deprecated_node_label_is_answered_with_the_label_that_replaced_it(key, value, instead):
    evaluation = harness.evaluate(malformed({key: value}))
    (problem,) = evaluation.error.problems
    assert problem.allowed == f"a node label Kubernetes has not deprecated (use {instead})", str(problem)


@pulumi.runtime.test
def test_values_at_the_edge_of_what_kubernetes_takes_are_accepted():
    evaluation = harness.evaluate(malformed(AT_THE_EDGE), secret_keys=("secretEnv",))
    assert evaluation.error is None, str(evaluation.error)
    container = evaluation.container
    assert container["image"] == AT_THE_EDGE["image.name"]
    assert container["resources"]["limits"]["memory"] == "1E"
    (claim,) = [m for m in evaluation.kubernetes_manifests if m["metadata"]["name"] == "c" * 253]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1.5Gi"
    assert evaluation.pod_template["metadata"]["labels"]["p" * 253 + "/" + "k" * 63] == "v" * 63


@pulumi.runtime.test
def test_quantities_written_as_yaml_numbers_are_taken_as_kubernetes_takes_them():
    """`cpu: 4` or `example.com/fpga: 1` in a stack file reach the program as numbers; a quantity in
    a Kubernetes manifest may be one too."""
    numbers = {"resources": {"requests": {"cpu": 0.5, "memory": 1073741824}, "limits": {"cpu": 4},
                             "extended": {"example.com/fpga": 1}}}  # fmt: skip
    evaluation = harness.evaluate(malformed(numbers))
    assert evaluation.error is None, str(evaluation.error)
    resources = evaluation.container["resources"]
    assert (resources["requests"]["cpu"], resources["requests"]["memory"]) == ("0.5", "1073741824")
    assert (resources["limits"]["cpu"], resources["limits"]["example.com/fpga"]) == ("4", "1")


@pytest.mark.parametrize("value", [True, 0.5], ids=["a boolean", "a fraction of a device"])
def test_a_number_that_is_no_quantity_of_its_field_is_refused(value):
    evaluation = harness.evaluate(malformed({"resources": {"extended": {"example.com/fpga": value}}}))
    (problem,) = evaluation.error.problems
    assert problem.key == 'ddp-infra:resources.extended["example.com/fpga"]' and "whole number" in problem.allowed, str(problem)


@pytest.mark.parametrize("label", ["app.kubernetes.io/instance", "job-name", "batch.kubernetes.io/job-name"])
def test_the_stacks_labels_and_a_template_patchs_are_held_to_one_label_key_rule(label):
    in_labels = harness.evaluate(malformed({"labels": {label: "other"}})).error.problems
    in_patch = harness.evaluate(malformed({"pod.templatePatch": {"metadata": {"labels": {label: "other"}}}})).error.problems
    assert [problem.allowed for problem in in_labels] == [problem.allowed for problem in in_patch]


def test_rules_about_several_keys_report_in_the_order_of_their_rules():
    changes = {
        "gpusPerNode": 4, "procsPerNode": 2, "nodes": "3", "storage.outputs.accessMode": "ReadWriteOncePod",
        "shmSize": "8Gi", "resources.limits.memory": "4Gi", "network.infiniband": True,
        "resources.extended": {"rdma/hca_shared_devices_a": 1}, "workload.kind": "jobset", "workload.name": "a" * 50,
        "rendezvous.store": "pod-0", "workload.sparePods": 2, "workload.liveness.port": 29500,
        "network.secondaryNetworks": ["ib-rail-0"], "annotations": {"k8s.v1.cni.cncf.io/networks": "x"},
        "labels": {"app.kubernetes.io/x": "y", "job-name": "z", "ok": "1"}, "env": {"NNODES": "3", "FOO": "1"},
    }  # fmt: skip
    keys = [problem.key.removeprefix("ddp-infra:") for problem in harness.evaluate(malformed(changes)).error.problems]
    assert keys == [
        "procsPerNode", "storage.outputs.accessMode", "shmSize", 'resources.extended["rdma/hca_shared_devices_a"]',
        "workload.name", "workload.liveness.port", "workload.sparePods", 'annotations["k8s.v1.cni.cncf.io/networks"]',
        'labels["app.kubernetes.io/x"]', "labels.job-name", "env.NNODES",
    ]  # fmt: skip
