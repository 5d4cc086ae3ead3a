"""The trainer image that toolchain/images.sh builds, read from its docker-archive tar, held to the
contract and the Dockerfile; and the image keys, which follow the build context and nothing else.

The image tests need the built tar (toolchain/images.sh, minutes and about 8 GB under the cache on a cold one)
and are skipped, with the missing path, without it. The key tests need only bash and python3.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
from trainer_testing import build_context_files

from toolchain.cluster.containerd import image_reference
from trainer import contract as c

REPO = Path(__file__).resolve().parents[2]
IMAGES_SH = REPO / "toolchain" / "images.sh"
TRAINER = REPO / "trainer"
pytestmark = pytest.mark.timeout(120)


def images_sh(*args: str, script: Path = IMAGES_SH, **env: str) -> str:
    result = subprocess.run(
        ["bash", str(script), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def keys(script: Path = IMAGES_SH, **env: str) -> dict[str, str]:
    return dict(line.split() for line in images_sh("--keys", script=script, **env).splitlines())


def printed(**env: str) -> list[list[str]]:
    return [line.split() for line in images_sh("--print", **env).splitlines()]


# --- what the Dockerfile says -------------------------------------------------------------------
def dockerfile_values(name: str) -> list[str]:
    text = (TRAINER / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [line.split(None, 1)[1] for line in lines if line.split(None, 1)[0].upper() == name]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in dockerfile_values("ENV"):
        env.update(pair.split("=", 1) for pair in shlex.split(args))
    return env


# --- what the image holds -----------------------------------------------------------------------
def trainer_tar() -> Path:
    (pause, trainer, shapes) = printed()
    assert (pause[0], trainer[0], shapes[0]) == ("pause", "trainer", "shapes")
    return Path(trainer[2])


@pytest.fixture(scope="module")
def image():
    """The trainer tar's image config, the files under /app/trainer from the layer that holds them,
    and the bytecode compiled from them in the layer above."""
    tar = trainer_tar()
    if not tar.is_file():
        # nothing the proxy could refuse goes into it (Debian packages and PyPI's): missing, it was not built
        pytest.fail(f"the trainer image is not built: {tar} does not exist: run `make setup` (toolchain/images.sh)", pytrace=False)
    with tarfile.open(tar) as outer:
        (manifest,) = json.load(outer.extractfile("manifest.json"))
        config = json.load(outer.extractfile(manifest["Config"]))
        app: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
        compiled: dict[str, bytes] = {}
        etc_passwd = None
        # The Dockerfile's own steps are the top layer: read from the top down until /app/trainer shows.
        for layer in reversed(manifest["Layers"]):
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                for member in inner:
                    name = member.name.removeprefix("./").lstrip("/")
                    if name.startswith("app/trainer/") and member.isfile():
                        into = compiled if "/__pycache__/" in name else app
                        data = inner.extractfile(member).read()
                        into[name.removeprefix("app/trainer/")] = data if into is compiled else (member, data)
                    elif name == "etc/passwd" and etc_passwd is None:
                        etc_passwd = inner.extractfile(member).read().decode()
            if app:
                break
    return {"tar": tar, "manifest": manifest, "config": config, "app": app, "compiled": compiled, "etc_passwd": etc_passwd}


def test_the_image_is_tagged_with_its_reference(image):
    ref = printed()[1][1]
    assert image["manifest"]["RepoTags"] == [ref]
    machine = platform.machine()
    assert image["config"]["os"] == "linux"
    assert image["config"]["architecture"] == {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def test_the_image_config_holds_to_the_contract(image):
    config = image["config"]["config"]
    assert config["User"] == f"{c.IMAGE_UID}:{c.IMAGE_GID}" == "1000:1000"
    assert config["Entrypoint"] == list(c.ENTRYPOINT_COMMAND)
    assert config["Cmd"] == list(c.DEFAULT_TRAIN_ARGS)
    assert config["WorkingDir"] == "/app"
    assert "29500/tcp" in config.get("ExposedPorts", {})


def test_the_image_env_is_the_dockerfiles_on_the_bases(image):
    env = dict(item.split("=", 1) for item in image["config"]["config"]["Env"])
    wanted = dockerfile_env()
    assert wanted and {k: env.get(k) for k in wanted} == wanted
    # `python` and `pip` are the base's virtualenv's, as in the pytorch/pytorch base
    assert env["PATH"].split(":")[0] == "/opt/venv/bin"
    assert env["VIRTUAL_ENV"] == "/opt/venv"


def test_app_trainer_holds_the_package_as_the_build_context_sends_it(image):
    sent = {name: path.read_bytes() for name, path in build_context_files().items()}
    assert {"__init__.py", "contract.py", "entrypoint.py", "train.py", "requirements.txt"} <= set(sent)
    assert {name: data for name, (_, data) in image["app"].items()} == sent
    for name, (member, _) in image["app"].items():
        # owned by root and not writable by the training user (uid/gid 1000)
        assert (member.uid, member.gid) == (0, 0), name
        assert not member.mode & 0o022, (name, oct(member.mode))


def test_every_module_of_the_trainer_is_compiled_in_the_image_against_its_source(image):
    """A pod's root is read-only: bytecode not in the image is compiled again by every process."""
    tag = sys.implementation.cache_tag  # the base's Python is this machine's minor version (3.11)
    sources = {name: data for name, (_, data) in image["app"].items() if name.endswith(".py")}
    expected = {f"{Path(name).parent / '__pycache__' / Path(name).stem}.{tag}.pyc".removeprefix("./"): data
                for name, data in sources.items()}  # fmt: skip
    assert set(image["compiled"]) == set(expected)
    for name, pyc in image["compiled"].items():
        flags = int.from_bytes(pyc[4:8], "little")
        assert flags == 0b11, f"{name}: not checked against a hash of its source ({flags:#b})"
        assert pyc[8:16] == importlib.util.source_hash(expected[name]), f"{name}: compiled from another source"


def test_the_training_user_exists_in_the_image(image):
    assert image["etc_passwd"], "the top layer has no /etc/passwd (the Dockerfile's useradd)"
    entries = [line.split(":") for line in image["etc_passwd"].splitlines()]
    assert [e for e in entries if e[2:4] == [str(c.IMAGE_UID), str(c.IMAGE_GID)]]


def test_the_base_layers_are_lean(image):
    """What the base build used and removed stays out: apt lists and caches, pip caches, logs, docs,
    device nodes, the build's wheelhouse and CA bundle mount points."""
    members: dict[str, tarfile.TarInfo] = {}
    with tarfile.open(image["tar"]) as outer:
        for layer in image["manifest"]["Layers"][:-1]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                members.update((m.name.removeprefix("./").strip("/"), m) for m in inner)
    assert "opt/venv/bin/python" in members and "usr/bin/python3" in members
    leftovers = [
        name for name in members
        if name.startswith(("var/lib/apt/lists/", "var/cache/apt/", "root/.cache", "var/cache/ddp-wheels",
                            "etc/ddp-build-ca.crt", "dev/", "tmp/", "var/tmp/", "var/log/"))
    ]  # fmt: skip
    assert not leftovers, leftovers[:20]
    docs = [n for n, m in members.items() if n.startswith("usr/share/doc/") and m.isfile() and not n.endswith("/copyright")]
    assert not docs, docs[:20]
    assert members["etc/resolv.conf"].size == 0


def test_the_base_holds_cuda_stubs_in_place_of_nvidias_libraries(image):
    """toolchain/cuda_stubs.py's work, as the image holds it: under nvidia/ only small stubs and the
    licenses, pip's metadata of every nvidia-* package kept (so the Dockerfile's pip install finds
    the pins installed)."""
    nvidia: dict[str, tarfile.TarInfo] = {}
    metadata: set[str] = set()
    with tarfile.open(image["tar"]) as outer:
        for layer in image["manifest"]["Layers"][:-1]:
            with tarfile.open(fileobj=outer.extractfile(layer)) as inner:
                for member in inner:
                    name = member.name.removeprefix("./").strip("/")
                    site, _, below = name.partition("/site-packages/")
                    if site.startswith("opt/venv/lib/python3") and below.startswith("nvidia/") and member.isfile():
                        nvidia[below] = member
                    elif below.startswith("nvidia_") and below.endswith(".dist-info/METADATA"):
                        metadata.add(below.split("-", 1)[0])
    libraries = {name: m.size for name, m in nvidia.items() if ".so" in name}
    assert any(name.rsplit("/", 1)[-1].startswith("libcudart.so.") for name in libraries), sorted(nvidia)
    assert max(libraries.values()) < 256 * 1024, sorted(libraries.items(), key=lambda item: -item[1])[:3]
    assert all(".so" in name or name.rsplit("/", 1)[-1].startswith("LICENSE") for name in nvidia), sorted(nvidia)
    # the same torch pin as this machine's virtualenv, so the same nvidia-* packages
    here = {p.name.split("-", 1)[0] for p in Path(sysconfig.get_paths()["purelib"]).glob("nvidia_*.dist-info")}
    assert here and metadata == here, (metadata, here)


# --- the keys -------------------------------------------------------------------------------------
def test_print_names_the_current_keys_under_the_cache_and_builds_nothing(tmp_path):
    cache = tmp_path / "cache"
    current = keys()
    lines = printed(DDP_INFRA_CACHE=str(cache))
    assert [line[0] for line in lines] == ["pause", "trainer", "shapes"]
    for name, ref, tar in lines:
        assert ref == f"localhost/ddp-infra/{name}:{current[name]}"
        assert tar == str(cache / "images" / f"{name}-{current[name]}.tar")
    assert not cache.exists()


def test_a_users_image_is_built_from_a_directory_with_a_dockerfile_to_a_reference_and_a_tar(tmp_path):
    """`--build DIR REF TAR` (make image): a wrong call is refused before anything is built or locked."""
    cache = tmp_path / "cache"
    for args, said in [
        (["--build", str(tmp_path)], "usage: "),
        (["--build", str(tmp_path), "my-task:dev", str(tmp_path / "x.tar")], f"no Dockerfile in {tmp_path}: "),
        (["--keys", "extra"], "usage: "),
    ]:
        refused = subprocess.run([str(IMAGES_SH), *args], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "DDP_INFRA_CACHE": str(cache)})  # fmt: skip
        assert refused.returncode == 2 and said in refused.stderr, (args, refused.stderr)
    assert not cache.exists()


@pytest.mark.parametrize(
    "name, reference",
    [
        ("my-task:dev", "docker.io/library/my-task:dev"),
        ("my-task", "docker.io/library/my-task:latest"),
        ("team/my-task:1", "docker.io/team/my-task:1"),
        ("registry.example.com:5000/team/my-task", "registry.example.com:5000/team/my-task:latest"),
        ("localhost/ddp-infra/pause:b7df", "localhost/ddp-infra/pause:b7df"),
        ("my-task@sha256:0123", "docker.io/library/my-task@sha256:0123"),
    ],
)
def test_an_image_name_is_the_reference_the_kubelet_resolves_it_to(name, reference):
    assert image_reference(name) == reference


@pytest.fixture
def source_copy(tmp_path):
    """What the keys are computed from (the scripts, pause.c, trainer/, examples/shapes/) plus an unrelated README.md."""
    repo = tmp_path / "repo"
    (repo / "toolchain" / "build").mkdir(parents=True)
    for name in ("images.sh", "build/build_context_digest.py", "pause.c", "cuda_stubs.py"):
        shutil.copy2(REPO / "toolchain" / name, repo / "toolchain" / name)
    shutil.copytree(TRAINER, repo / "trainer")
    shutil.copytree(REPO / "examples" / "shapes", repo / "examples" / "shapes")
    shutil.copy2(REPO / "README.md", repo / "README.md")
    return repo


def test_keys_follow_the_build_context_and_nothing_else(source_copy):
    repo = source_copy
    script = repo / "toolchain" / "images.sh"
    original = keys()
    assert set(original) == {"pause", "base", "trainer", "shapes"}
    # the same content elsewhere, with other mtimes: the same keys
    assert keys(script) == original

    # an unrelated file of the repository
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nchanged\n")
    assert keys(script) == original
    # files that .dockerignore keeps out of the build context
    (repo / "trainer" / "__pycache__").mkdir(exist_ok=True)
    (repo / "trainer" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0" * 16)
    (repo / "trainer" / ".pytest_cache").mkdir()
    (repo / "trainer" / ".pytest_cache" / "README.md").write_text("cache\n")
    assert keys(script) == original

    # a trainer source: the trainer's key, and the example's, built FROM it
    train = repo / "trainer" / "train.py"
    source = train.read_text()
    train.write_text(source + "\n# changed\n")
    changed = keys(script)
    assert changed["trainer"] != original["trainer"] and changed["shapes"] != original["shapes"]
    assert (changed["base"], changed["pause"]) == (original["base"], original["pause"])
    train.write_text(source)
    assert keys(script) == original

    # a new file in the build context
    (repo / "trainer" / "extra.py").write_text("X = 1\n")
    assert keys(script)["trainer"] != original["trainer"]
    (repo / "trainer" / "extra.py").unlink()

    # the Dockerfile, which the context does not send but the build reads
    dockerfile = repo / "trainer" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n# changed\n")
    assert keys(script)["trainer"] != original["trainer"]
    shutil.copy2(TRAINER / "Dockerfile", dockerfile)

    # the torch pin: the base's key, and so the trainer's
    requirements = repo / "trainer" / "requirements.txt"
    requirements.write_text(requirements.read_text().replace("torch==", "torch==0.0.0+"))
    changed = keys(script)
    assert changed["base"] != original["base"] and changed["trainer"] != original["trainer"]
    assert changed["pause"] == original["pause"]
    shutil.copy2(TRAINER / "requirements.txt", requirements)

    # what slims the base's CUDA libraries: the base's key, and so the trainer's
    cuda_stubs = repo / "toolchain" / "cuda_stubs.py"
    cuda_stubs.write_text(cuda_stubs.read_text() + "\n# changed\n")
    changed = keys(script)
    assert changed["base"] != original["base"] and changed["trainer"] != original["trainer"]
    assert changed["pause"] == original["pause"]
    shutil.copy2(REPO / "toolchain" / "cuda_stubs.py", cuda_stubs)

    # how the build context is read, written otherwise with the same output: the same keys
    digest = repo / "toolchain" / "build" / "build_context_digest.py"
    digest.write_text(digest.read_text() + "\n# changed\n")
    assert keys(script) == original
    shutil.copy2(REPO / "toolchain" / "build" / "build_context_digest.py", digest)

    # pause.c: only the pause image's key
    pause_c = repo / "toolchain" / "pause.c"
    pause_c.write_text(pause_c.read_text() + "\n/* changed */\n")
    changed = keys(script)
    assert changed["pause"] != original["pause"]
    assert (changed["base"], changed["trainer"], changed["shapes"]) == (original["base"], original["trainer"], original["shapes"])
    shutil.copy2(REPO / "toolchain" / "pause.c", pause_c)

    # the example's own files: only its key
    example_task = repo / "examples" / "shapes" / "shapes" / "task.py"
    example_task.write_text(example_task.read_text() + "\n# changed\n")
    changed = keys(script)
    assert changed["shapes"] != original["shapes"]
    assert {name: key for name, key in changed.items() if name != "shapes"} == {name: key for name, key in original.items() if name != "shapes"}


def test_keys_of_another_trainer_tree(source_copy):
    """DDP_INFRA_TRAINER_DIR points the repository's script at another build context."""
    other = source_copy / "trainer"
    assert keys(DDP_INFRA_TRAINER_DIR=str(other)) == keys()
    (other / "entrypoint.py").write_text((other / "entrypoint.py").read_text() + "\n# changed\n")
    assert keys(DDP_INFRA_TRAINER_DIR=str(other))["trainer"] != keys()["trainer"]


def test_a_context_without_a_torch_pin_is_refused(source_copy):
    (source_copy / "trainer" / "requirements.txt").write_text("numpy\n")
    result = subprocess.run(
        ["bash", str(IMAGES_SH), "--keys"], env={**os.environ, "DDP_INFRA_TRAINER_DIR": str(source_copy / "trainer")},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "torch==" in result.stderr
