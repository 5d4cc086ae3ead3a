"""The pod's side of the contract: the world from the pod env, the preflight, and torchrun's launch."""
