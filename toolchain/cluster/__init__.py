"""A real single-node Kubernetes cluster on this machine, for tests and for people.

    python -m toolchain.cluster up | down | status      (toolchain/cluster/__main__.py)
    with LocalCluster("test") as cluster: cluster.kubectl("get", "nodes")
    LocalCluster("jobs", addons=("jobset", "kueue", "volcano"))

Every part is built on this machine (toolchain/build.sh, toolchain/images.sh) and lives in a
network and mount namespace of its own; `stop()` ends every process it started, and `start()`
first cleans up whatever a crashed earlier run left. One module per part:
processes (the daemons, recorded with their start times), namespaces (the node's isolation and
the relay), cgroups, credentials, containerd (and the imported images), control_plane (etcd,
the API server, the controllers, what an installer adds), node (kubelet, kube-proxy, CoreDNS),
addons (JobSet, Kueue, Volcano), local_cluster (start, stop, status). docs/local-cluster.md
says how to use it.
"""

from .addons import ADDONS
from .local_cluster import CACHE, LocalCluster, image_archives
from .processes import ClusterError

__all__ = ["ADDONS", "CACHE", "ClusterError", "LocalCluster", "image_archives"]
