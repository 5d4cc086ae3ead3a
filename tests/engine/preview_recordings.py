"""The `pulumi preview --json` documents of tests/engine/previews/, each made by the real engine from
one scenario here: a copy of the project, a stack brought up in render mode, one config change,
its preview. test_engine_preview_comment_recorded.py reads the recordings without an engine;
test_engine_previews.py makes each one again and fails when the recording no longer matches.

  .venv/bin/python tests/engine/preview_recordings.py [NAME ...]   records them (toolchain on PATH)
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):  # run as a script: the imports the tests' rootdir gives
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from pulumi_project import PulumiProject

PREVIEWS = Path(__file__).parent / "previews"
# Made-up tokens, each starting as a real one does, so a test can look for the prefix.
OLD_TOKEN, NEW_TOKEN = "hf_recordingOldToken0123456789", "hf_recordingNewToken9876543210"


@dataclass(frozen=True)
class Scenario:
    name: str
    stack: str
    deploy: Callable[[PulumiProject, str], None]  # config set before the first `up`
    change: Callable[[PulumiProject, str], None]  # the change the preview shows
    fails: bool = False  # the program refuses the change: the preview exits non-zero


def _nothing(project: PulumiProject, stack: str) -> None:
    pass


def _render_mode(project: PulumiProject, stack: str) -> None:
    """The prod stack aimed at a render directory, so that no cluster is needed to record it."""
    project.config_set(stack, "kubernetes.renderDir", f"rendered/{stack}", path=True)


def _set(**values: str) -> Callable[[PulumiProject, str], None]:
    def change(project: PulumiProject, stack: str) -> None:
        for key, value in values.items():
            project.config_set(stack, key.replace("__", "."), value, path="__" in key)

    return change


def _token(value: str) -> Callable[[PulumiProject, str], None]:
    def change(project: PulumiProject, stack: str) -> None:
        project.config_set(stack, "hfToken", value, secret=True)

    return change


def _then(*steps: Callable[[PulumiProject, str], None]) -> Callable[[PulumiProject, str], None]:
    def change(project: PulumiProject, stack: str) -> None:
        for step in steps:
            step(project, stack)

    return change


def _forget_claims_record(project: PulumiProject, stack: str) -> None:
    """The state a stack deployed before the `claims` output existed has (ddp_infra/claim_changes.py):
    without that record, a storage class change is not refused and the preview plans the claim's replace."""
    exported = project.export_state(stack)
    for resource in exported["deployment"]["resources"]:
        if resource["type"] == "pulumi:pulumi:Stack":
            resource.get("outputs", {}).pop("claims", None)
    state = project.root / f"{stack}-state.json"
    state.write_text(json.dumps(exported))
    project.run("stack", "import", "--stack", stack, "--file", str(state))


SCENARIOS = {
    scenario.name: scenario
    for scenario in (
        Scenario("dev-nodes-2-to-64", "dev", _nothing, _set(nodes="64")),
        Scenario("dev-nodes-0", "dev", _nothing, _set(nodes="0"), fails=True),
        Scenario(
            "dev-namespace-deleted-token-rotated", "dev", _token(OLD_TOKEN),
            _then(_token(NEW_TOKEN), _set(namespace__create="false")),
        ),
        Scenario(
            "prod-outputs-claim-replaced-while-unprotected", "prod", _render_mode,
            _then(_forget_claims_record, _set(storage__outputs__storageClass="fast-rwx", storage__outputs__protect="false")),
        ),
    )
}  # fmt: skip


def record(scenario: Scenario, root: Path) -> dict[str, Any]:
    """The scenario's preview, from a new copy of the project under `root`."""
    project = PulumiProject(root)
    project.init_stack(scenario.stack)
    scenario.deploy(project, scenario.stack)
    project.up(scenario.stack)
    scenario.change(project, scenario.stack)
    result, preview = project.preview_json(scenario.stack, check=False)
    if (result.returncode != 0) != scenario.fails or not preview:
        raise AssertionError(f"{scenario.name}: the preview {'succeeded' if result.returncode == 0 else 'failed'}:\n{result.describe()}")
    return preview


# What differs between two recordings of one scenario: the provider's id (a UUID per deployment),
# the field manager the provider names at random, times, the engine's timing, the order in which
# the engine lists a resource's dependencies and the reasons of its diff, and where in the
# program's files a resource is registered (a line number, which any edit above it moves).
_VARYING = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"^pulumi-kubernetes-[0-9a-f]{8}$"), "pulumi-kubernetes-<id>"),
]
_VARYING_KEYS = {"duration", "created", "modified", "sourcePosition"}
_UNORDERED_KEYS = {"dependencies", "diffReasons", "replaceReasons"}


def comparable(document: Any) -> Any:
    """`document` without what legitimately varies from one recording of a scenario to the next."""
    if isinstance(document, dict):
        return {
            key: sorted(comparable(value)) if key in _UNORDERED_KEYS and isinstance(value, list) else comparable(value)
            for key, value in document.items()
            if key not in _VARYING_KEYS
        }
    if isinstance(document, list):
        return [comparable(item) for item in document]
    if isinstance(document, str):
        for pattern, replacement in _VARYING:
            document = pattern.sub(replacement, document)
        return document
    return document


def without_source_positions(document: Any) -> Any:
    """What a recording keeps: a registration's place in the program's files, or in this machine's
    Python and toolchain (paths relative to the project's temporary copy), is no part of a preview."""
    if isinstance(document, dict):
        return {key: without_source_positions(value) for key, value in document.items() if key != "sourcePosition"}
    if isinstance(document, list):
        return [without_source_positions(item) for item in document]
    return document


def path_of(name: str) -> Path:
    return PREVIEWS / f"{name}.json"


def main(names: list[str]) -> None:
    for name in names or list(SCENARIOS):
        with tempfile.TemporaryDirectory(prefix=f"record-{name}-") as root:
            preview = record(SCENARIOS[name], Path(root))
        path_of(name).write_text(json.dumps(without_source_positions(preview), indent=2, sort_keys=True) + "\n")
        print(f"recorded {path_of(name)}")


if __name__ == "__main__":
    main(sys.argv[1:])
