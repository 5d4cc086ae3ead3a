"""ddp-infra as a package (pyproject.toml): its wheel holds what the program imports at run time, and
`pip install <repo>` into a fresh virtualenv, from the wheels of the declared dependencies alone (the
wheelhouse `make setup` downloads), gives a program outside the repository everything it needs: the
dev stack evaluates there under Pulumi's mocks to its workload and outputs."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from package_install import REPO, VERSION, fresh_install, package_source, run

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def source(tmp_path) -> Path:
    return package_source(tmp_path / "source")


def test_the_wheel_holds_the_component_the_commands_and_the_contract_and_nothing_else(source, tmp_path):
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path), str(source), cwd=tmp_path)
    (wheel,) = tmp_path.glob("ddp_infra-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"ddp_infra", "observe", "trainer"}, tops
    for module in ("ddp_infra/components/training_world.py", "ddp_infra/config/reading.py", "observe/status.py", "trainer/contract.py"):
        assert module in names, module
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    requires = [line for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert sorted(re.match(r"[\w.-]+", line.split()[1])[0] for line in requires) == ["pulumi", "pulumi-kubernetes", "pydantic"], requires


# A program of the user's own, outside the repository: the dev stack's config under Pulumi's mocks.
PROGRAM = textwrap.dedent(
    """
    import json, sys
    import pulumi
    from ddp_infra import config, program
    from ddp_infra.names import PROJECT

    class Echo(pulumi.runtime.Mocks):
        def new_resource(self, args):
            outputs = {"outputs": {}} if args.typ == "pulumi:pulumi:StackReference" else args.inputs
            return f"{args.name}-id", outputs

        def call(self, args):
            return {}

    pulumi.runtime.set_mocks(Echo(), project=PROJECT, stack="dev", preview=False)
    pulumi.runtime.set_all_config({f"{PROJECT}:{key}": value if isinstance(value, str) else json.dumps(value)
                                   for key, value in json.loads(sys.argv[1]).items()})
    seen = {}

    @pulumi.runtime.test
    def deploy():
        outputs = program.build(config.load())
        return pulumi.Output.all(**{k: outputs[k] for k in ("workloadKind", "worldSize", "namespace")}).apply(seen.update)

    deploy()
    print(json.dumps({**seen, "from": program.__file__}))
    """
)


def test_a_fresh_virtualenv_installs_the_repository_from_the_declared_wheels_and_runs_a_program_with_it(source, tmp_path):
    python = str(fresh_install(source, tmp_path / "venv"))
    values = {"nodes": "3", "image": {"name": "ddp-trainer:dev"}, "namespace": {"name": "user-world"},
              "kubernetes": {"renderDir": str(tmp_path / "rendered")}}  # fmt: skip
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    seen = json.loads(run(python, str(program), json.dumps(values), cwd=tmp_path).stdout.splitlines()[-1])
    assert seen["from"].startswith(str(tmp_path / "venv")), seen  # the installed package, not the repository
    assert (seen["workloadKind"], seen["worldSize"], seen["namespace"]) == ("job", 3, "user-world"), seen


def test_the_version_is_the_changelog_s_newest():
    newest = re.search(r"^## (\S+)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert newest and newest[1] == VERSION, f"pyproject.toml says {VERSION}; CHANGELOG.md's newest entry is {newest and newest[1]}"
