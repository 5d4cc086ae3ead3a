"""The local cluster the demo runs on: the one of that name already running, or one it starts (and
then alone removes), with the trainer image under the name the dev stack deploys."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterable, Union

from toolchain.cluster import CACHE, LocalCluster, image_archives

DEMO_HOME = CACHE / "demo"


def demo_home(cluster_name: str) -> Path:
    """The demo's files for one cluster: project copy, state backend, passphrase."""
    return DEMO_HOME / cluster_name


def _made_marker(cluster_name: str) -> Path:
    return demo_home(cluster_name) / "started-the-cluster"


def ensure_cluster(name: str, dev_image: str, say: Callable[[str], None]) -> LocalCluster:
    """The running cluster `name`, started if it is not, its images imported and the trainer image
    tagged `dev_image`."""
    cluster = LocalCluster.existing(name)
    images = image_archives()
    trainer_ref, trainer_tar = images["trainer"]
    if not trainer_tar.is_file():
        raise SystemExit(f"the trainer image is not built ({trainer_tar} missing): run `make setup`")
    if cluster.status()["running"]:
        say(f"cluster {name}: running already, reused (KUBECONFIG={cluster.kubeconfig})")
        if trainer_ref not in cluster.containerd.digests():
            say(f"cluster {name}: importing the trainer image {trainer_ref} ({_gib(trainer_tar)}), a minute or more")
        for node in cluster.nodes:
            node.containerd.import_images(images)  # a no-op when they are there
    else:
        say(f"cluster {name}: starting it, with the trainer image ({_gib(trainer_tar)}); "
            f"the first import into a new cluster takes minutes")  # fmt: skip
        cluster = start_cluster(name, True, say)
    cluster.tag_image(trainer_ref, dev_image if "/" in dev_image else f"docker.io/library/{dev_image}")
    return cluster


def _gib(path: Path) -> str:
    return f"{path.stat().st_size / 2**30:.1f} GiB"


def start_cluster(name: str, with_images: Union[bool, Iterable[str]], say: Callable[[str], None]) -> LocalCluster:
    """Starts the cluster, marked as the demo's: `down` removes it whole."""
    demo_home(name).mkdir(parents=True, exist_ok=True)
    _made_marker(name).touch()
    cluster = LocalCluster(name, with_images=with_images).start()
    say(f"cluster {name}: ready in {cluster.startup_seconds:.0f} s (KUBECONFIG={cluster.kubeconfig})")
    return cluster


def started_by_demo(name: str) -> bool:
    return _made_marker(name).exists()


def remove_cluster(name: str, say: Callable[[str], None]) -> None:
    """Stops the cluster and removes its files, image store included: only a cluster the demo started."""
    cluster = LocalCluster(name)
    cluster.stop()
    shutil.rmtree(cluster.home, ignore_errors=True)
    shutil.rmtree(demo_home(name), ignore_errors=True)
    say(f"cluster {name}: stopped, and {cluster.home} removed")
