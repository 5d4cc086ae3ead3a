#!/usr/bin/env bash
# One script, past 350 lines, on purpose: the three images' keys are computed together from the
# build functions' own text, which must then live beside each other in this file.
#
# Builds the container images of the local test cluster without a registry or a Docker engine
# (buildah, debootstrap, gcc), into a cache outside the repository, each as an uncompressed
# docker-archive tar that `ctr -n k8s.io images import <tar>` (containerd 1.6) accepts:
#   - pause:        the pod sandbox, one static C binary (toolchain/pause.c), also its `python`;
#   - trainer-base: Debian bookworm (debootstrap minbase) with Debian's python3, a virtualenv at
#                   /opt/venv first on PATH, and the pins of trainer/requirements.txt from PyPI;
#                   torch's nvidia-* CUDA libraries (3 GB) slimmed to what a CPU-only node needs
#                   to import torch (toolchain/cuda_stubs.py); it stands in for the pytorch/pytorch
#                   base and lives only in buildah's storage, not as a tar;
#   - trainer:      trainer/Dockerfile as it is, build context trainer/, on that base, no pull;
#   - shapes:       examples/shapes/Dockerfile as it is, FROM that trainer image: a task of one's
#                   own installed in the trainer's image, as a user builds one.
# Each image is named after a key, a hash of everything it is built from: its recipe below (the
# bash text of its build function, comments aside), its sources, and the key of what it is
# built on. A tar whose key is there is done; one whose key is not is built under a temporary
# name (`<key>.partial` in the storage, `.<name>-<key>.tar.partial` beside the tars) and renamed
# into place when complete, so an interrupted build never looks done, and a second run with
# nothing changed builds nothing and takes a fraction of a second. Tars and images of other
# keys are pruned after a build. buildah keeps its own storage under the cache (never the
# machine's): the overlay driver where this kernel mounts overlayfs, else vfs (which copies
# every layer in full). Downloads are kept for the next base build: debootstrap's .debs in
# <cache>/images/debs, the wheels in <cache>/images/wheels/torch-<version>.
# Logs: <cache>/images/logs/<step>.log.
#
#   toolchain/images.sh          build whatever is missing
#   toolchain/images.sh --print  print `<name> <image ref> <tar path>` for pause, trainer and shapes,
#                                the current keys' paths, built or not (builds nothing)
#   toolchain/images.sh --keys   print `<name> <key>` for pause, base, trainer and shapes (builds nothing)
#   toolchain/images.sh --build DIR REF TAR
#                                also DIR/Dockerfile, FROM the trainer image (TRAINER_IMAGE), as REF
#                                into TAR: a user's task in its image (`make image`), built every time
#
# DDP_INFRA_TRAINER_DIR points at another build context than the repository's trainer/ (the
# tests use it on a copy); DDP_INFRA_IMAGES_DRIVER forces a storage driver (overlay or vfs).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
trainer_dir=$(cd "${DDP_INFRA_TRAINER_DIR:-$root/trainer}" && pwd)
example_dir=$root/examples/shapes
cache=${DDP_INFRA_CACHE:-$HOME/.cache/ddp-infra}/images
logs=$cache/logs

usage="usage: $0 [--print | --keys | --build DIR REF TAR]"
mode=build
case "${1:-}" in
  --print) mode=print ;;
  --keys) mode=keys ;;
  --build) mode=user ;;
  "") ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
if { [ $mode = user ] && [ $# -ne 4 ]; } || { [ $mode != user ] && [ $# -gt 1 ]; }; then
  echo "$usage" >&2
  exit 2
fi
if [ $mode = user ]; then
  if [ ! -f "$2/Dockerfile" ]; then
    echo "[images] no Dockerfile in $2: a task's image is built FROM the trainer's by its Dockerfile (docs/trainer.md)" >&2
    exit 2
  fi
  # absolute: each build runs in a work directory of its own
  user_dir=$(cd "$2" && pwd) user_ref=$3 user_tar=$(cd "$(dirname "$4")" && pwd)/$(basename "$4")
fi

torch_version=$(sed -n 's/^torch==\([^[:space:];#]*\).*/\1/p' "$trainer_dir/requirements.txt")
if [ -z "$torch_version" ]; then
  echo "[images] $trainer_dir/requirements.txt must pin torch==X" >&2
  exit 1
fi
# Every pin of trainer/requirements.txt goes into the base, so that the Dockerfile's own
# `RUN pip install -r requirements.txt` finds them installed and needs no network.
mapfile -t trainer_pins < <(sed -n 's/^\([A-Za-z0-9_.-]*==[^[:space:];#]*\).*/\1/p' "$trainer_dir/requirements.txt")

# What the base is made of. Part of the base's key (see keys below).
suite=bookworm
debian_packages=(python3 python3-venv passwd) # passwd: useradd/groupadd, which the Dockerfile runs
venv=/opt/venv
pip_version=26.3 # the venv's pip, upgraded from Debian's 23.0.1
base_env=(
  "PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "VIRTUAL_ENV=$venv"
  "LANG=C.UTF-8"
  # a Dockerfile's `RUN pip install` asks PyPI for nothing it does not install
  "PIP_DISABLE_PIP_VERSION_CHECK=1"
  # what the pytorch/pytorch base sets, for GPU nodes with the NVIDIA container runtime
  "NVIDIA_VISIBLE_DEVICES=all"
  "NVIDIA_DRIVER_CAPABILITIES=compute,utility"
)
# Where debootstrap and apt download from (not part of a key: any mirror serves the same suite).
mirror=${DDP_INFRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DDP_INFRA_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# buildah on the cache's own storage and configuration files (written before the first build).
bah() {
  CONTAINERS_STORAGE_CONF=$cache/storage.conf CONTAINERS_REGISTRIES_CONF=$cache/registries.conf \
    TMPDIR=$cache/tmp buildah --root "$storage" --runroot "$runroot" --storage-driver "$driver" "$@"
}

# export_image REF TAR: writes the image REF from buildah's storage as an uncompressed
# docker-archive tagged REF, under a temporary name first.
export_image() {
  local ref=$1 tar=$2 partial
  partial=$cache/.$(basename "$tar").partial
  rm -f "$partial"
  bah push --signature-policy "$cache/policy.json" --disable-compression --format v2s2 \
    "$ref" "docker-archive:$partial:$ref"
  mv -f "$partial" "$tar"
}

# in_root ROOTFS COMMAND...: runs COMMAND chrooted into ROOTFS with a clean env, in a mount
# namespace of its own that holds /proc, /dev, the machine's resolv.conf, the wheelhouse (at
# /var/cache/ddp-wheels) and the machine's CA bundle (at /etc/ddp-build-ca.crt, for a TLS proxy):
# every mount is gone when COMMAND ends, however it ends.
in_root() {
  local rootfs=$1
  shift
  unshare --mount --propagation private -- /bin/sh -euc '
    rootfs=$1 wheels=$2 ca=$3
    shift 3
    mount -t proc proc "$rootfs/proc"
    mount --rbind /dev "$rootfs/dev"
    mount --bind /etc/resolv.conf "$rootfs/etc/resolv.conf"
    mount --bind "$wheels" "$rootfs/var/cache/ddp-wheels"
    mount --bind -o ro "$ca" "$rootfs/etc/ddp-build-ca.crt"
    exec chroot "$rootfs" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' in_root "$rootfs" "$wheelhouse" "$ca_bundle" "$@"
}

# The build functions below run in a fresh work directory ($work), with errexit, output to the
# step's log. Each leaves its image in buildah's storage; pause and trainer also write their tar.

build_pause() {
  local ctr
  gcc -static -O2 -s -Wall -Wextra -o pause "$here/pause.c"
  ctr=$(bah from --signature-policy "$cache/policy.json" --name ddp-infra-pause-work scratch)
  bah copy --chmod 0755 "$ctr" pause /pause
  # Also as the trainer container's `python`: a stack whose image is this one runs pods that wait
  # for SIGTERM and exit 0, to test what controllers do with a world without the trainer image.
  bah copy --chmod 0755 "$ctr" pause /usr/local/bin/python
  bah config --entrypoint '["/pause"]' --cmd '' --env PATH=/usr/local/bin --user 65535:65535 \
    --created-by "gcc -static -O2 toolchain/pause.c (toolchain/images.sh)" "$ctr"
  bah commit --signature-policy "$cache/policy.json" --format docker --rm "$ctr" "$pause_ref.partial"
  bah tag "$pause_ref.partial" "$pause_ref"
  bah rmi "$pause_ref.partial"
  export_image "$pause_ref" "$pause_tar"
}

build_base() {
  local ctr mnt pkgs=${debian_packages[*]} env=()
  ctr=$(bah from --signature-policy "$cache/policy.json" --name ddp-infra-base-work scratch)
  mnt=$(bah mount "$ctr")
  trap 'bah umount ddp-infra-base-work >/dev/null 2>&1 || true' EXIT
  # debootstrap mounts /proc and /sys in the target itself: its own mount namespace drops them.
  mkdir -p "$cache/debs"
  unshare --mount --propagation private -- \
    debootstrap --variant=minbase --cache-dir="$cache/debs" "$suite" "$mnt" "$mirror"
  # apt: the point release's updates and security fixes, no recommends, translations or docs.
  cat >"$mnt/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\nAcquire::Languages "none";\n' \
    >"$mnt/etc/apt/apt.conf.d/90ddp-infra"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' >"$mnt/etc/dpkg/dpkg.cfg.d/90ddp-infra"
  # mount points for in_root, removed below
  mkdir -p "$mnt/var/cache/ddp-wheels" "$wheelhouse"
  touch "$mnt/etc/ddp-build-ca.crt" "$mnt/etc/resolv.conf"
  in_root "$mnt" apt-get update
  in_root "$mnt" apt-get -y upgrade
  # shellcheck disable=SC2086 # one word per package
  in_root "$mnt" apt-get -y install $pkgs
  in_root "$mnt" apt-get clean
  # The virtualenv. Wheels are downloaded into the wheelhouse in the cache (pip skips those it
  # has) and installed from there only, so a rebuild with the same torch downloads nothing big.
  in_root "$mnt" python3 -m venv "$venv"
  local pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input --no-cache-dir)
  if [ "$ca_bundle" != /dev/null ]; then pip+=(--cert /etc/ddp-build-ca.crt); fi
  local wheels=(--no-index --find-links /var/cache/ddp-wheels)
  in_root "$mnt" "${pip[@]}" download --progress-bar off --dest /var/cache/ddp-wheels "pip==$pip_version"
  in_root "$mnt" "${pip[@]}" install "${wheels[@]}" "pip==$pip_version"
  in_root "$mnt" "${pip[@]}" download --progress-bar off --dest /var/cache/ddp-wheels "${trainer_pins[@]}"
  in_root "$mnt" "${pip[@]}" install "${wheels[@]}" "${trainer_pins[@]}"
  python3 "$here/cuda_stubs.py" "$mnt$venv"/lib/python3*/site-packages
  # pip still sees every pin installed, and torch imports and trains on a CPU.
  in_root "$mnt" "${pip[@]}" check
  in_root "$mnt" "$venv/bin/python" -c 'import torch, torch.distributed
assert not torch.cuda.is_available() and torch.distributed.is_gloo_available()
print("torch", torch.__version__, "on a CPU:", float(torch.ones(4, 4).matmul(torch.ones(4, 4)).sum()))'
  # Lean: no apt lists or caches, no logs, docs or man pages, no build-time files; the container
  # runtime provides /dev, resolv.conf, hostname and hosts.
  rmdir "$mnt/var/cache/ddp-wheels"
  rm -f "$mnt/etc/ddp-build-ca.crt" "$mnt/etc/hostname"
  : >"$mnt/etc/resolv.conf"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$mnt/etc/hosts"
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/* "$mnt"/var/cache/debconf/*-old \
    "$mnt"/var/log/* "$mnt"/tmp/* "$mnt"/var/tmp/* "$mnt"/root/.cache "$mnt"/dev/* \
    "$mnt"/usr/share/man/* "$mnt"/usr/share/info/*
  find "$mnt/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$mnt/usr/share/doc" -mindepth 1 -type d -empty -delete
  du -sh "$mnt$venv"
  du -sh "$mnt"
  bah umount "$ctr"
  trap - EXIT
  for e in "${base_env[@]}"; do env+=(--env "$e"); done
  bah config "${env[@]}" --cmd '["python"]' \
    --created-by "debootstrap --variant=minbase $suite; apt-get install $pkgs; $venv: pip==$pip_version ${trainer_pins[*]} (toolchain/images.sh)" \
    "$ctr"
  bah commit --signature-policy "$cache/policy.json" --format docker --rm "$ctr" "$base_ref.partial"
  bah tag "$base_ref.partial" "$base_ref"
  bah rmi "$base_ref.partial"
}

# bud_and_export REF TAR DIR BUILD_ARG: DIR/Dockerfile as it is, build context DIR, with one
# --build-arg (what it is built FROM), no pull; kept in the storage as REF and written to TAR.
bud_and_export() {
  local ref=$1 tar=$2 dir=$3 build_arg=$4
  bah bud --signature-policy "$cache/policy.json" --pull=never --format docker \
    --build-arg "$build_arg" -f "$dir/Dockerfile" -t "$ref.partial" "$dir"
  bah tag "$ref.partial" "$ref"
  bah rmi "$ref.partial"
  export_image "$ref" "$tar"
}

build_trainer() { bud_and_export "$trainer_ref" "$trainer_tar" "$trainer_dir" "BASE_IMAGE=$base_ref"; }
build_example() { bud_and_export "$example_ref" "$example_tar" "$example_dir" "TRAINER_IMAGE=$trainer_ref"; }
# A user's image leaves nothing in the storage: the tar is what the cluster loads.
build_user() {
  bud_and_export "$user_ref" "$user_tar" "$user_dir" "TRAINER_IMAGE=$trainer_ref"
  bah rmi "$user_ref"
}

# What the trainer's key covers of its build context DIR: one line per file that `buildah bud`
# sends, and the ignore file and the Dockerfile (toolchain/build/build_context_digest.py). The digest's
# output is in the key, not its code: a change to it that changes no line changes no image.
context_digest() {
  python3 "$here/build/build_context_digest.py" "$1"
}

hash16() { sha256sum | cut -c1-16; }

# The keys: recipe text (bash's own rendering of the functions, so comments do not count) and
# values, sources, and the key of the image underneath.
pause_key=$({ declare -f build_pause export_image; cat "$here/pause.c"; } | hash16)
base_key=$({ declare -f build_base in_root; declare -p suite debian_packages venv pip_version base_env trainer_pins; cat "$here/cuda_stubs.py"; } | hash16)
trainer_key=$({ declare -f build_trainer bud_and_export export_image; echo "base $base_key"; context_digest "$trainer_dir"; } | hash16)
example_key=$({ declare -f build_example bud_and_export export_image; echo "trainer $trainer_key"; context_digest "$example_dir"; } | hash16)

pause_ref=localhost/ddp-infra/pause:$pause_key
base_ref=localhost/ddp-infra/trainer-base:$base_key
trainer_ref=localhost/ddp-infra/trainer:$trainer_key
pause_tar=$cache/pause-$pause_key.tar
trainer_tar=$cache/trainer-$trainer_key.tar
example_ref=localhost/ddp-infra/shapes:$example_key
example_tar=$cache/shapes-$example_key.tar

case $mode in
  keys)
    printf 'pause %s\nbase %s\ntrainer %s\nshapes %s\n' "$pause_key" "$base_key" "$trainer_key" "$example_key"
    exit 0
    ;;
  print)
    printf 'pause %s %s\ntrainer %s %s\nshapes %s %s\n' "$pause_ref" "$pause_tar" "$trainer_ref" "$trainer_tar" "$example_ref" "$example_tar"
    exit 0
    ;;
esac

if [ $mode = build ] && [ -f "$pause_tar" ] && [ -f "$trainer_tar" ] && [ -f "$example_tar" ]; then
  echo "[images] up to date: $pause_tar $trainer_tar $example_tar"
  exit 0
fi

for tool in buildah debootstrap gcc readelf unshare flock python3; do
  command -v "$tool" >/dev/null || { echo "[images] missing on this machine: $tool" >&2; exit 1; }
done
mkdir -p "$cache" "$logs"
# One build at a time per cache; a run that waited finds the other's images done.
exec 9>"$cache/.lock"
if ! flock -n 9; then
  echo "[images] waiting for another run to finish (lock: $cache/.lock)"
  flock 9
fi
# The builds share the machine's cores with everything else running on it.
renice -n 10 -p $$ >/dev/null

# overlay if this kernel and file system mount it (a probe in a throwaway mount namespace), else vfs.
overlay_works() {
  local d rc=0
  d=$(mktemp -d "$cache/.probe.XXXXXX")
  mkdir "$d/lower" "$d/upper" "$d/work" "$d/merged"
  unshare --mount --propagation private -- mount -t overlay overlay \
    -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null || rc=1
  rm -rf "$d"
  return $rc
}
driver=${DDP_INFRA_IMAGES_DRIVER:-}
if [ -z "$driver" ]; then
  if overlay_works; then driver=overlay; else driver=vfs; fi
fi
# One storage per driver (a storage cannot change drivers).
storage=$cache/storage-$driver
runroot=$cache/run-$driver

# Configuration of our own, so the machine's storage.conf, registries and policy play no part:
# no registry is ever searched, and the images we write are accepted as they are.
cat >"$cache/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$storage"
runroot = "$runroot"
EOF
echo 'unqualified-search-registries = []' >"$cache/registries.conf"
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$cache/policy.json"
# pip's own cache stores nothing behind a proxy that drops caching headers (as here): the
# wheels the base installs are kept in a wheelhouse per torch version instead.
wheelhouse=$cache/wheels/torch-$torch_version
ca_bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -f "$ca_bundle" ] || ca_bundle=/dev/null
# What an interrupted run left behind: working containers (and their mounts), partial tars.
rm -rf "$cache"/.*.partial "$cache"/.work.* "$cache/tmp"
mkdir -p "$cache/tmp"
bah rm --all >/dev/null 2>&1 || true
echo "[images] buildah storage: $storage (driver $driver)"

# step NAME REF BUILD_FUNCTION: runs BUILD_FUNCTION in a work directory with its output in
# <logs>/NAME.log; on failure, shows the end of that log and exits non-zero.
step() {
  local name=$1 ref=$2 fn=$3 log=$logs/$1.log start=$SECONDS rc
  echo "[images] building $name $ref (log: $log)"
  work=$(mktemp -d "$cache/.work.XXXXXX")
  set +e
  (set -e; cd "$work"; "$fn") >"$log" 2>&1
  rc=$?
  set -e
  rm -rf "$work"
  if [ $rc -ne 0 ]; then
    bah rm --all >/dev/null 2>&1 || true
    echo "[images] FAILED: $name after $((SECONDS - start)) s; the end of $log:" >&2
    tail -n 25 "$log" | sed 's/^/    /' >&2
    exit 1
  fi
  echo "[images] built $name in $((SECONDS - start)) s"
}

[ -f "$pause_tar" ] || step pause "$pause_ref" build_pause
if [ ! -f "$trainer_tar" ]; then
  if bah inspect --type image "$base_ref" >/dev/null 2>&1; then
    echo "[images] base $base_ref: in storage"
  else
    step base "$base_ref" build_base
  fi
  step trainer "$trainer_ref" build_trainer
fi
# The trainer's image in the storage, for what is built FROM it (its tar is there, perhaps not its image).
trainer_in_storage() {
  if ! bah inspect --type image "$trainer_ref" >/dev/null 2>&1; then
    bah pull --signature-policy "$cache/policy.json" "docker-archive:$trainer_tar" >/dev/null
  fi
}
if [ ! -f "$example_tar" ]; then
  trainer_in_storage
  step shapes "$example_ref" build_example
fi
if [ $mode = user ]; then
  trainer_in_storage
  step "$(basename "$user_tar" .tar)" "$user_ref" build_user
fi

# Keep only the current keys: tars of other keys, images of other keys in the storage, and the
# wheelhouses of other torch versions.
for tar in "$cache"/pause-*.tar "$cache"/trainer-*.tar "$cache"/shapes-*.tar; do
  if [ -e "$tar" ] && [ "$tar" != "$pause_tar" ] && [ "$tar" != "$trainer_tar" ] && [ "$tar" != "$example_tar" ]; then
    rm -f "$tar"
    echo "[images] pruned $tar"
  fi
done
bah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | while read -r ref; do
  case $ref in
    "$pause_ref" | "$base_ref" | "$trainer_ref" | "$example_ref") ;;
    localhost/ddp-infra/*) bah rmi "$ref" >/dev/null && echo "[images] pruned $ref" ;;
  esac
done
bah rmi --prune >/dev/null 2>&1 || true
for dir in "$cache"/wheels/*; do
  if [ -d "$dir" ] && [ "$dir" != "$wheelhouse" ]; then
    rm -rf "$dir"
    echo "[images] pruned $dir"
  fi
done
rm -rf "$cache/tmp"
echo "[images] ready: $(du -h "$pause_tar" | cut -f1) $pause_tar, $(du -h "$trainer_tar" | cut -f1) $trainer_tar, $(du -h "$example_tar" | cut -f1) $example_tar"
if [ $mode = user ]; then
  echo "[images] $user_ref: $user_tar"
fi
