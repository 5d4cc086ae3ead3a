"""ddp-infra: multi-node PyTorch DDP training on Kubernetes (see ddp_infra/)."""

from pathlib import Path

import pulumi

from ddp_infra import config, program

for name, value in program.build(config.load(), Path(__file__).parent).items():
    pulumi.export(name, value)
