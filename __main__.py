"""ddp-infra: multi-node PyTorch DDP training on Kubernetes (see ddp_infra/)."""

import pulumi

from ddp_infra import config, program

for name, value in program.build(config.load()).items():
    pulumi.export(name, value)
