"""The recorded previews (tests/engine/previews/) are what the real engine previews today: each
scenario of preview_recordings.py is run again and compared with its recording, less what varies
from one run to the next. A recording that no longer matches is re-made with
`.venv/bin/python tests/engine/preview_recordings.py NAME`."""

from __future__ import annotations

import copy
import json

import pytest

from preview_recordings import SCENARIOS, comparable, path_of, record

pytestmark = pytest.mark.timeout(1800)


def differences(recorded: object, now: object, where: str = "") -> list[str]:
    """Where two documents differ, as `path: recorded => now` lines."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        return [line for key in sorted(set(recorded) | set(now), key=str)
                for line in differences(recorded.get(key, "<absent>"), now.get(key, "<absent>"), f"{where}.{key}")]  # fmt: skip
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        return [line for i, (a, b) in enumerate(zip(recorded, now)) for line in differences(a, b, f"{where}[{i}]")]
    return [] if recorded == now else [f"{where or '.'}: {json.dumps(recorded)[:200]} => {json.dumps(now)[:200]}"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_recorded_preview_is_what_the_engine_previews_now(name, tmp_path):
    recorded = json.loads(path_of(name).read_text())
    now = record(SCENARIOS[name], tmp_path)
    changed = differences(comparable(recorded), comparable(now))
    assert not changed, f"{path_of(name).name} is stale; re-record it (see preview_recordings.py):\n" + "\n".join(changed[:40])


def test_an_edited_recording_is_caught_and_what_varies_is_not():
    document = json.loads(path_of("dev-nodes-2-to-64").read_text())
    index = next(i for i, step in enumerate(document["steps"]) if step["urn"].endswith("kubernetes:batch/v1:Job::ddp-trainer"))

    edited = copy.deepcopy(document)
    edited["steps"][index]["newState"]["inputs"]["spec"]["completions"] = 65
    assert differences(comparable(document), comparable(edited)) == [f".steps[{index}].newState.inputs.spec.completions: 64 => 65"]

    varied = copy.deepcopy(document)
    varied["duration"] += 1
    step = varied["steps"][index]
    step["provider"] = step["provider"].replace(step["provider"].rsplit("::", 1)[1], "00000000-0000-4000-8000-000000000000")
    step["newState"]["dependencies"].reverse()
    step["replaceReasons"].reverse()
    step["newState"]["sourcePosition"] = "project:///ddp_infra/components/trainer.py#1"
    assert varied != document
    assert differences(comparable(document), comparable(varied)) == []
