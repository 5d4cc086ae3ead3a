"""A new user's machine, for the walks through the docs (the README's, docs/trainer.md's): a fresh
clone of the project, and a new shell of a user whose home is a directory of the test."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pulumi_project import REPO, PulumiProject, cli_home, toolchain_bin_dir
from toolchain.cluster.local_cluster import CACHE

# What `make` needs beside the program: its Makefile, scripts and toolchain, and the example that
# toolchain/images.sh builds with the trainer's image.
MAKE_FILES = ("Makefile",)
MAKE_DIRS = ("scripts", "toolchain", "examples")


def git(copy: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=copy, capture_output=True, text=True, check=True, timeout=60).stdout


def fresh_clone(root: Path) -> Path:
    """The project's files as a clone has them: a repository whose first commit is the project."""
    template = PulumiProject(root / "template")  # copies the program and stack files, links the venv
    copy = template.dir
    for name in MAKE_FILES:
        shutil.copy2(REPO / name, copy / name)
    for name in MAKE_DIRS:
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / ".gitignore", copy / ".gitignore")
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "-c", "user.name=walk", "-c", "user.email=walk@example.invalid", "commit", "-q", "-m", "clone")
    return copy


def new_shell_path() -> str:
    """A new shell's PATH after `make setup`: this machine's, without the toolchain's bin directory
    that `make test` puts first. No pulumi on it: the README's own first line has to bring it."""
    bin_dir = str(toolchain_bin_dir())
    path = os.pathsep.join(entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry.rstrip("/") != bin_dir)
    assert shutil.which("pulumi", path=path) is None, f"pulumi is on this machine's PATH ({path}): the walk would not show the README brings it"
    return path


def user_environment(home: Path, kubeconfig: str) -> dict[str, str]:
    """A new user's shell: no backend, passphrase or stack chosen yet, and no pulumi on PATH. The
    user's home is `home`, and so is the CLI's: its PULUMI_HOME is where it would be for a user whose
    home that is, so the walk's login never touches this machine's. Its plugins are the ones `make
    setup` installed in the CLI's home here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "KUBE"))}
    (home / ".pulumi").mkdir(parents=True)
    plugins = cli_home() / "plugins"
    if plugins.is_dir():  # a provider installed as a plugin, rather than on PATH
        (home / ".pulumi" / "plugins").symlink_to(plugins)
    env.update(
        HOME=str(home),
        PULUMI_HOME=str(home / ".pulumi"),
        PATH=new_shell_path(),
        DDP_INFRA_CACHE=str(CACHE),  # where `make setup` put everything, under this machine's home
        KUBECONFIG=kubeconfig,
        KUBECACHEDIR=str(home / ".kube" / "cache"),
        PULUMI_SKIP_UPDATE_CHECK="true",
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        PULUMI_SKIP_CONFIRMATIONS="true",  # the confirmation prompt of up and destroy, answered yes
    )
    return env
