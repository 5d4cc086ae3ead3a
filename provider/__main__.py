"""Serves ddp-infra's DdpTrainingWorld to the Pulumi engine as the component package `ddp-infra`
(ddp_infra/package.py), from this checkout of the repository; pulumi-resource-ddp-infra beside it runs it."""

import sys
import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))  # the checkout's ddp_infra, observe and trainer
VERSION = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]

from pulumi.provider.experimental import component_provider_host  # noqa: E402

from ddp_infra.package import DdpTrainingWorld  # noqa: E402

if __name__ == "__main__":
    component_provider_host(name="ddp-infra", components=[DdpTrainingWorld], version=VERSION)
