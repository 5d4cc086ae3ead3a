#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, idempotently:
#   1. a Python virtualenv with requirements-dev.txt (torch included), kept in the cache and
#      linked as .venv, so a new clone of the repository reuses it instead of downloading torch again,
#      and beside it the wheels a program installing the package needs (program-wheels);
#   2. the Debian packages of the local test cluster (containerd, runc, the CNI plugins, iptables,
#      ipset, conntrack) and of the daemonless image build (buildah, skopeo, umoci, debootstrap,
#      binutils);
#   3. the Pulumi CLI, its Python language host and the Kubernetes provider, and the cluster's
#      Kubernetes components, etcd and CoreDNS, built from Go modules (toolchain/build.sh);
#   4. the pause and trainer images, the trainer's from trainer/Dockerfile (toolchain/images.sh).
# Steps 1 and 3 run in one lane, step 4 in another at the same time: the Go builds keep both cores
# busy while the images' downloads and unpacking mostly wait on the network and the disk. Setup
# fails if either lane does.
# The cache lives outside the repository: $DDP_INFRA_CACHE, default ~/.cache/ddp-infra.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${DDP_INFRA_CACHE:-$HOME/.cache/ddp-infra}
mkdir -p "$cache"

python=${PYTHON:-python3}
# Tools taken from the machine: the Go toolchain builds the rest, openssl makes the test API
# server's certificates, kubectl talks to it.
missing=()
for tool in "$python" go openssl kubectl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] missing on this machine: ${missing[*]} (install them, then run make setup again)" >&2
  exit 1
fi
# The local cluster's and the image build's Debian packages (needs root, as the cluster does).
debs=(containerd runc containernetworking-plugins iptables ipset conntrack buildah skopeo umoci debootstrap binutils)
missing_debs=()
for deb in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$deb" 2>/dev/null | grep -q 'ok installed' || missing_debs+=("$deb")
done
if [ ${#missing_debs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "[setup] the local cluster needs root and these Debian packages: ${missing_debs[*]}" >&2
    exit 1
  fi
  echo "[setup] installing ${missing_debs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_debs[@]}" >/dev/null
else
  echo "[setup] Debian packages present: ${debs[*]}"
fi

# The venv is keyed on the pinned requirements and the interpreter: a change to either builds a new one.
key=$( { cat "$root/requirements.txt" "$root/trainer/requirements.txt" "$root/trainer/requirements-transformers.txt" "$root/requirements-dev.txt"; "$python" -VV; } | sha256sum | cut -c1-16)
venv="$cache/venv-$key"
virtualenv() {
  if [ ! -f "$venv/.complete" ]; then
    echo "[setup] creating $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$root/requirements-dev.txt"
    touch "$venv/.complete"
  else
    echo "[setup] virtualenv up to date: $venv"
  fi
  # The wheels a program that installs the package (pyproject.toml) needs, its build backend's
  # included, at the pins the tests run: tests/test_package.py installs it from these alone.
  if [ ! -f "$venv/program-wheels/.complete" ]; then
    rm -rf "$venv/program-wheels"
    "$venv/bin/python" -m pip download --quiet --dest "$venv/program-wheels" -r "$root/requirements.txt" \
      "setuptools==$("$venv/bin/python" -c 'import setuptools; print(setuptools.__version__)')"
    touch "$venv/program-wheels/.complete"
  fi
  ln -sfn "$venv" "$root/.venv"
}
# The toolchain's build reads the Pulumi SDK's minimum CLI version from the virtualenv: it follows it.
toolchain() {
  virtualenv
  "$root/toolchain/build.sh"
}

# lane NAME FUNCTION_OR_COMMAND...: runs it in the background (its lines carry their step's prefix).
lane_pids=()
lane_names=()
lane() {
  local name=$1
  shift
  "$@" &
  lane_pids+=($!)
  lane_names+=("$name")
}
# A SIGTERM (a CI time limit) ends the lanes' processes too, as Ctrl-C, sent to the whole group, does.
descendants() { local child; for child in $(ps -o pid= --ppid "$1"); do descendants "$child"; echo "$child"; done; }
stop_lanes() { kill $(for pid in "${lane_pids[@]}"; do descendants "$pid"; echo "$pid"; done) 2>/dev/null || true; }
trap 'stop_lanes; exit 143' TERM
lane toolchain toolchain
lane images "$root/toolchain/images.sh"
failed=()
for i in "${!lane_pids[@]}"; do
  wait "${lane_pids[$i]}" || failed+=("${lane_names[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[setup] failed: ${failed[*]} (their lines above say why)" >&2
  exit 1
fi
echo "[setup] done"
