"""The local cluster's command line: `python -m toolchain.cluster up | down | status | image`, and
the relay each cluster runs (`relay`, started by the cluster itself)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .addons import ADDONS
from .containerd import image_reference
from .local_cluster import CACHE, HERE, LocalCluster
from .namespaces import relay
from .network import MAX_NODES
from .processes import ClusterError


def main() -> int:
    parser = argparse.ArgumentParser(description="A local Kubernetes cluster of one or more nodes (see docs/local-cluster.md).")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("up", "down", "status", "image"):
        p = sub.add_parser(command)
        p.add_argument("--name", default=os.environ.get("DDP_INFRA_CLUSTER", "dev"), help="cluster name (default dev)")
        if command == "image":
            p.add_argument("dir", type=Path, help="the directory of the image's Dockerfile (FROM the trainer's: ARG TRAINER_IMAGE)")
            p.add_argument("tag", help="the name a stack gives it (image.name), e.g. my-task:dev")
        if command == "up":
            p.add_argument("--without-images", action="store_true", help="import no image (no pod can start)")
            p.add_argument("--domain", default="cluster.local", help="the cluster domain (default cluster.local)")
            p.add_argument("--addon", action="append", default=[], choices=sorted(ADDONS), help="start an add-on with the cluster (repeatable)")
            p.add_argument("--workload-api", action="store_true", help="the Workload API (scheduling.k8s.io/v1beta1) and gang scheduling on")
            p.add_argument("--nodes", type=int, default=1, help=f"how many nodes (default 1, at most {MAX_NODES}); each advertises its share of the machine")
            p.add_argument("--label", action="append", default=[], type=node_label, metavar="INDEX:KEY=VALUE",
                           help="a label of node INDEX (0 is the first), e.g. 1:topology.kubernetes.io/zone=b (repeatable)")
    relay_parser = sub.add_parser("relay", help=argparse.SUPPRESS)
    relay_parser.add_argument("listen_port", type=int)
    relay_parser.add_argument("netns_pid", type=int)
    relay_parser.add_argument("target_port", type=int)
    args = parser.parse_args()
    if args.command == "relay":
        relay(args.listen_port, args.netns_pid, args.target_port)
        return 0
    labels: dict[int, dict[str, str]] = {}
    for index, key, value in getattr(args, "label", ()):
        labels.setdefault(index, {})[key] = value
    try:
        if args.command == "image":
            cluster = LocalCluster.existing(args.name)
        else:
            cluster = LocalCluster(args.name, with_images=not getattr(args, "without_images", False),
                                   domain=getattr(args, "domain", "cluster.local"), addons=getattr(args, "addon", ()),
                                   workload_api=getattr(args, "workload_api", False), nodes=getattr(args, "nodes", 1),
                                   node_labels=labels)  # fmt: skip
    except ClusterError as error:
        parser.error(str(error))
    if args.command == "image":
        try:
            load_image(cluster, args.dir, args.tag)
        except ClusterError as error:
            print(f"[cluster] {error}", file=sys.stderr)
            return 1
    elif args.command == "up":
        try:
            cluster.start()
        except (ClusterError, FileNotFoundError) as error:
            print(f"[cluster] {args.name} did not start: {error}", file=sys.stderr)
            return 1
        print(f"[cluster] {args.name} ready in {cluster.startup_seconds:.1f} s: node(s) {', '.join(n.name for n in cluster.nodes)}")
        for name, ref in cluster.images.items():
            print(f"[cluster] image {name}: {ref}")
        print(f"export KUBECONFIG={cluster.kubeconfig}   # context {cluster.context}")
    elif args.command == "down":
        cluster.stop()
        print(f"[cluster] {args.name} stopped; nothing of it is left running")
    else:
        print(json.dumps(cluster.status(), indent=2))
    return 0


def load_image(cluster: LocalCluster, directory: Path, tag: str) -> None:
    """What `docker build` and `kind load` do elsewhere: DIR's Dockerfile built FROM the trainer image
    (toolchain/images.sh --build), loaded into every node of the running cluster as `tag`."""
    if not cluster.status().get("running"):
        raise ClusterError(f"cluster {cluster.name} is not running: `make cluster-up CLUSTER={cluster.name}` starts it")
    reference = image_reference(tag)
    (CACHE / "images").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE / "images", prefix=".load-") as scratch:  # the archive, gone once loaded
        tar = Path(scratch) / "image.tar"
        if subprocess.run([str(HERE / "images.sh"), "--build", str(directory), reference, str(tar)]).returncode != 0:
            raise ClusterError(f"the image of {directory} was not built (above: toolchain/images.sh's own words)")
        for each in cluster.nodes:  # as `kind load image-archive` does
            each.containerd.load(tar)
    print(f"[cluster] {reference} on node(s) {', '.join(n.name for n in cluster.nodes)}: a stack names it image.name: {tag}")


def node_label(text: str) -> tuple[int, str, str]:
    index, _, label = text.partition(":")
    key, equals, value = label.partition("=")
    if not (index.isdigit() and key and equals):
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: INDEX:KEY=VALUE, e.g. 1:topology.kubernetes.io/zone=b")
    return int(index), key, value


sys.exit(main())
