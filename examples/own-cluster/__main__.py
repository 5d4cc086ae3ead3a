"""A program that already has its cluster and its trainer image, adding a sweep of DDP training worlds.

Each entry of the `worlds` config is one world (the stack config's keys, docs/configuration.md), in
its own namespace, on the program's own Kubernetes provider. On EKS or GKE the provider is built from
the cluster's kubeconfig and the image is your build's output (docs/own-cluster.md); here both are
the local cluster's: the provider reads $KUBECONFIG, and a ConfigMap stands for the image build step,
recording the image it was given, so that the worlds get the image as another resource's output.
"""

import pulumi
import pulumi_kubernetes as k8s

from ddp_infra import DdpTrainingWorld, DdpTrainingWorldArgs

settings = pulumi.Config()
cluster = k8s.Provider("cluster", kubeconfig="")
built = k8s.core.v1.ConfigMap("trainer-image", data={"image": settings.require("image")}, opts=pulumi.ResourceOptions(provider=cluster))
for name, config in settings.require_object("worlds").items():
    world = DdpTrainingWorld(name, DdpTrainingWorldArgs(config=config, image=built.data["image"]), opts=pulumi.ResourceOptions(provider=cluster))
    world.export()  # its outputs as <name>.<output>: `pulumi stack output sweep-a.statusCommand`
