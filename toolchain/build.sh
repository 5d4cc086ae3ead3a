#!/usr/bin/env bash
# One script, past 400 lines, on purpose: every tool's build reads the same pins, cache and proxy
# checks, and `make setup` runs it as one step.
#
# Builds the tools the project runs from Go modules (the Go module proxy is the only source of
# them this project's machines reach), into a versioned cache outside the repository:
#   - the Pulumi CLI and its Python language host, at the `pulumi==` pin of requirements.txt; where
#     the proxy refuses the pin, the CLI at the nearest release it serves and the host from the
#     newest sdk/v3 that contains it (see cli_fallback_version and build_language_host);
#   - the Kubernetes resource provider, at the `pulumi-kubernetes==` pin (the Python SDK's version,
#     so the plugin the SDK asks for is the one built), installed as a plugin;
#   - kube-apiserver and etcd, a real API server for tests (toolchain/apiserver/server.py);
#   - the test cluster's other components (toolchain/cluster/): the kubelet, controller-manager,
#     scheduler, kube-proxy, CoreDNS, and the JobSet and Kueue controllers with their modules'
#     manifests;
#   - Volcano's scheduler with its module's CRDs and its chart's RBAC, another add-on;
#   - actionlint, the linter the tests run on .github/workflows;
#   - versitygw, an S3-compatible object store with SigV4 credentials, for the tests of an s3:// data source.
# A Pulumi CLI, language host or provider already on PATH (the official installer's, a build of
# one's own) is linked instead of built, a CLI when it is at least the SDK's minimum version.
# Each component is built in a temporary directory and renamed into place when complete, so an
# interrupted build never looks done; a second run only checks and takes about a second.
# A component whose module the proxy refuses is reported (UNAVAILABLE) and skipped without failing
# the run; any other build failure fails it. Logs: <cache>/toolchain/logs/.
#
#   toolchain/build.sh            build whatever is missing
#   toolchain/build.sh --bin-dir  print the directory to put on PATH (builds nothing)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=${DDP_INFRA_CACHE:-$HOME/.cache/ddp-infra}/toolchain

pin() { sed -n "s/^$1==\([^[:space:];#]*\).*/\1/p" "$root/requirements.txt"; }
pulumi_version=$(pin pulumi)
kubernetes_version=$(pin pulumi-kubernetes)
if [ -z "$pulumi_version" ] || [ -z "$kubernetes_version" ]; then
  echo "[toolchain] requirements.txt must pin pulumi==X and pulumi-kubernetes==Y" >&2
  exit 1
fi
# The test cluster: every Kubernetes component at one version (1.37, the newest the proxy serves:
# the Workload API's gang scheduling in beta, scheduling.k8s.io/v1beta1), and an etcd at least
# 3.5.13, the oldest that kube-apiserver 1.31+ accepts.
kube_version=1.37.2
# The API server of the release before, alone: it serves the Workload API as scheduling.k8s.io/v1alpha2,
# which the preview's check of the served version is tested against beside the cluster's v1beta1.
previous_apiserver_version=1.36.3
etcd_version=3.5.21
# Cluster DNS for the test cluster (its `kubernetes` plugin serves cluster.local).
coredns_version=1.14.7
# The GitHub Actions workflow linter.
actionlint_version=1.7.12
# The object store the s3:// data source is tested against (its posix backend: a directory's
# subdirectories are the buckets, their files the objects).
versitygw_version=1.8.0
# The JobSet controller, an add-on of the test cluster (`workload.kind: jobset`).
jobset_version=0.12.0
# The Kueue controller, an add-on of the test cluster (`scheduling.gang.scheduler: kueue`): the
# newest release the proxy serves (it refuses 0.13 and 0.14).
kueue_version=0.19.2
# Volcano's scheduler (`scheduling.gang.scheduler: volcano`): the only release of its module the proxy serves.
volcano_version=1.10.0
# kube-router's network policy controller, which enforces the stack's NetworkPolicy on the test
# cluster. The only release the proxy serves; its advisories (GHSA-phqm-jgc3-qf8g: the service
# proxy's external IPs; GHSA-v5mh-h5hx-7v92: the router's GoBGP API) are in the two parts the
# cluster turns off (toolchain/cluster/node.py). kube-network-policies, the other enforcer served,
# needs nftables' queue (CONFIG_NFT_QUEUE), which this kernel lacks.
kube_router_version=2.1.0
# The Pulumi YAML language host, for the YAML program that adds ddp-infra as a component package
# (`pulumi package add` needs the host's Link: v1.25.0 lacks it, v1.30.0 has it). The newest release
# the proxy serves of those tried (it refuses v1.38.2, v1.39.0 to v1.43.0, v1.45.0 and v1.50.0).
yaml_version=1.38.1

bin_dir=$cache/bin-pulumi-$pulumi_version-kubernetes-$kubernetes_version-kube-$kube_version-apiserver-$previous_apiserver_version-etcd-$etcd_version-coredns-$coredns_version-jobset-$jobset_version-kueue-$kueue_version-volcano-$volcano_version-kube-router-$kube_router_version-versitygw-$versitygw_version-yaml-$yaml_version
if [ "${1:-}" = --bin-dir ]; then
  echo "$bin_dir"
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: $0 [--bin-dir]" >&2
  exit 2
fi

provider_dir=$cache/pulumi-resource-kubernetes-v$kubernetes_version
kubernetes_dir=$cache/kubernetes-v$kube_version
previous_apiserver_dir=$cache/kube-apiserver-v$previous_apiserver_version
etcd_dir=$cache/etcd-v$etcd_version
coredns_dir=$cache/coredns-v$coredns_version
actionlint_dir=$cache/actionlint-v$actionlint_version
jobset_dir=$cache/jobset-v$jobset_version
kueue_dir=$cache/kueue-v$kueue_version
volcano_dir=$cache/volcano-v$volcano_version
kube_router_dir=$cache/kube-router-v$kube_router_version
versitygw_dir=$cache/versitygw-v$versitygw_version
yaml_dir=$cache/pulumi-language-yaml-v$yaml_version
logs=$cache/logs
mkdir -p "$bin_dir" "$logs"

export PULUMI_SKIP_UPDATE_CHECK=true
# Go's build cache for these builds: under this cache, not Go's own (~/.cache/go-build), and gone
# once every component is built, since a built component is never built again. A cold build left
# 18 GB there (2026-11-29), beside 7 GB of downloaded modules, which stay in Go's module cache.
export GOCACHE=$cache/.go-build
# The builds share the machine's cores with everything else running on it.
renice -n 10 -p $$ >/dev/null

# Prints the module cache's directory (or go.mod file) for MODULE@VERSION, downloading it, or fails
# with go's error.
module_dir() { go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d.get("Error") or print(d["Dir"]))'; }
module_gomod() { go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d.get("Error") or print(d["GoMod"]))'; }

# The build functions below run in a fresh work directory, with errexit, and leave their
# binaries in ./out, which `component` then renames into place.

# wrapped_build BINARY MAIN_PACKAGES MODULE@VERSION GOMOD_PY_FLAGS [GO_BUILD_FLAGS...]
# Builds MAIN_PACKAGES (space-separated) from a wrapper module that requires MODULE@VERSION and
# carries the replaces of that module's own go.mod (see gomod.py, which GOMOD_PY_FLAGS are passed
# to). An empty BINARY builds every package into ./out under its own name.
wrapped_build() {
  local binary=$1 mains=$2 module=$3 gomod_flags=$4 gomod edits
  shift 4
  gomod=$(module_gomod "$module")
  mkdir -p wrapper out
  (
    cd wrapper
    go mod init ddp-infra-toolchain/wrapper
    go mod edit -require="$module"
    edits=$(go mod edit -json "$gomod" | python3 "$here/build/gomod.py" $gomod_flags)
    if [ -n "$edits" ]; then
      mapfile -t edits <<<"$edits"
      go mod edit "${edits[@]}"
    fi
    echo "[toolchain] wrapper go.mod for $module:"
    cat go.mod
    # shellcheck disable=SC2086 # one word per package
    go build -mod=mod -trimpath -o "../out/$binary" "$@" $mains
  )
}

pulumi_ldflags="-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$pulumi_version"

build_cli() {
  echo "[toolchain] Pulumi CLI v$cli_version (the pin is v$pulumi_version, the SDK's minimum v$sdk_minimum)"
  wrapped_build pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
    "github.com/pulumi/pulumi/pkg/v3@v$cli_version" "--siblings v$cli_version" \
    -tags osusergo,grpcnotrace -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$cli_version"
}

# The language host's own module (sdk/python/cmd/pulumi-language-python/v3) at the pin, else, where
# the proxy refuses it (2026-11: at every version), the host's package inside sdk/v3 at
# $lang_fallback_version, the newest sdk/v3 that still contains it. That host reads the virtualenv
# only from its -virtualenv flag, where CLIs since 3.209 send it inside each request, so it is
# installed behind language-host-wrapper.sh, which passes the project's (install_host_wrapper). The
# -exec script it runs the program through is the pinned SDK's in both cases.
lang_fallback_version=3.79.0
build_language_host() {
  local sdk
  if [ "$lang_version" = "$pulumi_version" ]; then
    wrapped_build pulumi-language-python "$lang_module" "$lang_module@v$lang_version" \
      "--siblings v$lang_version" -tags osusergo,grpcnotrace -ldflags "$pulumi_ldflags"
  else
    wrapped_build pulumi-language-python-v$lang_version "$lang_module" "github.com/pulumi/pulumi/sdk/v3@v$lang_version" "" \
      -tags osusergo,grpcnotrace -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$lang_version"
  fi
  # The host runs the program through this script, which it looks for beside its own binary.
  sdk=$(module_dir "github.com/pulumi/pulumi/sdk/v3@v$pulumi_version")
  install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" out/
}

# The fallback host behind its wrapper, in the bin directory, with the script that answers its
# question of the virtualenv's packages (python-packages.sh): written on every run, so that a change
# to them rebuilds nothing. The CLI takes the host beside its own executable, the wrapper the
# host binary and the scripts beside itself.
install_host_wrapper() {
  local host=pulumi-language-python-v$lang_version wrapper
  link "$lang_dir/$host" "$host"
  put 0755 "$here/build/python-packages.sh" "$bin_dir/python-packages"
  put 0644 "$here/build/python-packages.py" "$bin_dir/python-packages.py"
  wrapper=$(mktemp "$cache/.wrapper.XXXXXX")
  sed "s/@HOST@/$host/" "$here/build/language-host-wrapper.sh" >"$wrapper"
  put 0755 "$wrapper" "$bin_dir/pulumi-language-python"
  rm -f "$wrapper"
}

# put MODE SOURCE DEST: DEST becomes a copy of SOURCE where it differs, by one rename (a link at
# DEST replaced, not its target): a command that runs the tools meanwhile (a setup during the
# tests) finds the old file or the new one, never a half-written one.
put() {
  if ! cmp -s "$2" "$3"; then
    cp "$2" "$3.new"
    chmod "$1" "$3.new"
    mv -f "$3.new" "$3"
  fi
}

build_yaml_host() {
  wrapped_build pulumi-language-yaml github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml \
    "github.com/pulumi/pulumi-yaml@v$yaml_version" "" -tags osusergo,grpcnotrace
}

# The provider's main package embeds files (schema-embed.json, ...) that its `go generate` step
# writes and the module zip lacks: build inside a writable copy of the module. Its go.mod replaces
# the sdk module with the repository's ../sdk, which the zip lacks: the replace is dropped, so the
# served sdk at the version it requires applies. Where the proxy refuses the release's version but
# serves the pseudo-version of the release's own commit (provider_release_commits), that is built,
# stamped with the release's version: the same source.
provider_module=github.com/pulumi/pulumi-kubernetes/provider/v4
# release version -> the pseudo-version of the commit its tag points at
declare -A provider_release_commits=([4.25.0]=v4.0.0-20260115033456-f47bc2d6f199)
build_provider() {
  local src
  src=$(module_dir "$provider_module@$provider_module_version")
  cp -r "$src" provider
  chmod -R u+w provider
  mkdir out
  (
    cd provider
    go mod edit -dropreplace=github.com/pulumi/pulumi-kubernetes/sdk/v4
    VERSION=$kubernetes_version go generate ./cmd/pulumi-resource-kubernetes
    go build -mod=mod -trimpath -o ../out/pulumi-resource-kubernetes \
      -ldflags "-X $provider_module/pkg/version.Version=$kubernetes_version" ./cmd/pulumi-resource-kubernetes
  )
}

# The control plane and the node components, in one build (they share most of their packages).
kubernetes_binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
build_kubernetes() { kube_build "$kube_version" "${kubernetes_binaries[*]/#/k8s.io/kubernetes/cmd/}"; }

# kube_build VERSION PACKAGES: Kubernetes' main packages at VERSION, its staging modules at the
# matching v0 release, stamped with the version they report.
kube_build() {
  local v=$1 minor=${1#*.}
  minor=${minor%%.*}
  export CGO_ENABLED=0
  wrapped_build "" "$2" "k8s.io/kubernetes@v$v" "--staging v0.${v#*.}" \
    -ldflags "-X k8s.io/component-base/version.gitVersion=v$v -X k8s.io/component-base/version.gitMajor=${v%%.*} -X k8s.io/component-base/version.gitMinor=$minor"
}

build_previous_apiserver() { kube_build "$previous_apiserver_version" k8s.io/kubernetes/cmd/kube-apiserver; }

build_etcd() {
  export CGO_ENABLED=0
  wrapped_build etcd go.etcd.io/etcd/server/v3 "go.etcd.io/etcd/server/v3@v$etcd_version" ""
}

build_coredns() {
  export CGO_ENABLED=0
  wrapped_build coredns github.com/coredns/coredns "github.com/coredns/coredns@v$coredns_version" ""
}

build_actionlint() {
  export CGO_ENABLED=0
  wrapped_build actionlint github.com/rhysd/actionlint/cmd/actionlint "github.com/rhysd/actionlint@v$actionlint_version" "" \
    -ldflags "-X github.com/rhysd/actionlint.version=$actionlint_version"
}

build_versitygw() {
  export CGO_ENABLED=0
  wrapped_build versitygw github.com/versity/versitygw/cmd/versitygw "github.com/versity/versitygw@v$versitygw_version" ""
}

# build_controller BINARY MODULE MAIN_PACKAGE VERSION: the manager binary, and the module's own
# manifests (config/: CRDs, RBAC, webhooks) with the default install rendered from them, which the
# test cluster takes its objects from (toolchain/addons/controller_addon.py).
build_controller() {
  local binary=$1 module=$2 main=$3 version=$4 src
  export CGO_ENABLED=0
  wrapped_build "$binary" "$main" "$module@v$version" "" -ldflags "-X $module/pkg/version.GitVersion=v$version"
  src=$(module_dir "$module@v$version")
  cp -r "$src/config" out/config
  chmod -R u+w out/config
  kubectl kustomize out/config/default >out/install.yaml
}

build_jobset() { build_controller jobset-manager sigs.k8s.io/jobset sigs.k8s.io/jobset "$jobset_version"; }
build_kueue() { build_controller kueue-manager sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue "$kueue_version"; }

# Volcano's scheduler alone (toolchain/addons/volcano.py), and beside it its module's CRDs and the chart's
# template of the scheduler's objects, whose ClusterRole the test cluster binds it to.
build_volcano() {
  local module=volcano.sh/volcano src
  export CGO_ENABLED=0
  wrapped_build vc-scheduler "$module/cmd/scheduler" "$module@v$volcano_version" ""
  src=$(module_dir "$module@v$volcano_version")
  mkdir out/volcano-crds
  cp "$src"/config/crd/volcano/bases/*.yaml "$src/installer/helm/chart/volcano/templates/scheduler.yaml" out/volcano-crds/
}

build_kube_router() {
  local module=github.com/cloudnativelabs/kube-router/v2
  export CGO_ENABLED=0
  wrapped_build kube-router "$module/cmd/kube-router" "$module@v$kube_router_version" "" \
    -ldflags "-X $module/pkg/version.Version=v$kube_router_version"
}

# Is version $1 at least $2 (semver order, as sort -V sees it)?
version_at_least() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }

# The oldest Pulumi CLI the pinned Python SDK works with (its automation API's minimum); the pin
# itself when the virtualenv is not there yet.
sdk_minimum=$("$root/.venv/bin/python" -c \
  'from pulumi.automation._minimum_version import _MINIMUM_VERSION as v; print(v)' 2>/dev/null) || sdk_minimum=$pulumi_version

# PATH without our own bin directory, to find what is installed elsewhere.
outside_path=$(printf %s "$PATH" | tr : '\n' | grep -vxF "$bin_dir" | paste -sd:)
# A tool on that PATH that is not one of ours, else nothing.
external() {
  local p
  p=$(PATH=$outside_path command -v "$1") || return 1
  case $(readlink -f "$p") in "$cache"/*) return 1 ;; esac
  echo "$p"
}

# A Pulumi CLI installed elsewhere (the official installer's ~/.pulumi/bin, a package manager, a
# build of one's own) is used as it is when it is at least the SDK's minimum: the CLI and the
# SDK talk over a versioned protocol, so the CLI need not be the pin.
external_pulumi() {
  local p v
  p=$(external pulumi) || return 1
  v=$("$p" version 2>/dev/null) || return 1
  v=${v#v}
  if version_at_least "${v%%+*}" "$sdk_minimum"; then echo "$p"; else
    echo "[toolchain] ignoring the Pulumi CLI at $p: v$v is older than v$sdk_minimum, the SDK's minimum" >&2
    return 1
  fi
}

# served MODULE@VERSION...: does the Go module proxy serve them all?
served() { go list -m -json "$@" >/dev/null 2>&1; }

# The CLI version to build: the pin, else the fallback, when the Go module proxy serves both its
# pkg/v3 and its sdk/v3. The proxy does not list the versions it serves, so the fallback is the
# newest one seen served (2026-11: the pin's v3.272.0 is refused, v3.274.1 is served).
cli_fallback_version=3.274.1
cli_build_version() {
  local v
  for v in "$pulumi_version" "$cli_fallback_version"; do
    version_at_least "$v" "$sdk_minimum" || continue
    if served "github.com/pulumi/pulumi/pkg/v3@v$v" "github.com/pulumi/pulumi/sdk/v3@v$v"; then
      echo "$v"
      return 0
    fi
  done
  echo "$pulumi_version"  # let the build report the proxy's answer
}

# The language host's package and the version to build it at (see build_language_host).
if served "github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3@v$pulumi_version"; then
  lang_module=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
  lang_version=$pulumi_version
  lang_dir=$cache/pulumi-language-python-v$pulumi_version
else
  lang_module=github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
  lang_version=$lang_fallback_version
  lang_dir=$cache/pulumi-language-python-v$lang_version-exec-v$pulumi_version
  lang_note="the proxy refuses the host's module at the pin v$pulumi_version; building the host of sdk/v3@v$lang_version (the newest that contains it) with the pin's -exec script"
fi
# The provider's module version: the release's, else the pseudo-version of the release's commit.
provider_module_version=v$kubernetes_version
if ! served "$provider_module@v$kubernetes_version" && [ -n "${provider_release_commits[$kubernetes_version]:-}" ] &&
  served "$provider_module@${provider_release_commits[$kubernetes_version]}"; then
  provider_module_version=${provider_release_commits[$kubernetes_version]}
  provider_note="the proxy refuses $provider_module@v$kubernetes_version; building $provider_module_version, the same commit (the v$kubernetes_version tag's)"
fi

failed=()
unavailable=()
# component NAME OUTPUT_DIR BUILD_FUNCTION: builds unless OUTPUT_DIR is there. A module that the
# proxy refuses is reported but does not stop the other components; any other failure does.
component() {
  local name=$1 dir=$2 fn=$3 log="$logs/$1.log" start=$SECONDS work rc
  [ -d "$dir" ] && return 0
  echo "[toolchain] building $name -> $dir (log: $log)"
  work=$(mktemp -d "$cache/.work.XXXXXX")
  set +e
  (set -e; cd "$work"; "$fn") >"$log" 2>&1
  rc=$?
  set -e
  # A concurrent run that finished first counts as done too.
  if [ $rc -eq 0 ] && { mv -T "$work/out" "$dir" 2>/dev/null || [ -d "$dir" ]; }; then
    echo "[toolchain] built $name in $((SECONDS - start)) s"
  elif grep -q 'This module version is not available\|403 Forbidden\|404 Not Found\|410 Gone' "$log"; then
    echo "[toolchain] UNAVAILABLE: $name: the Go module proxy does not serve a module it needs:" >&2
    grep -m3 'not available\|403 Forbidden\|404 Not Found\|410 Gone' "$log" | sed 's/^/    /' >&2
    unavailable+=("$name: $(grep -m1 'not available\|403 Forbidden\|404 Not Found\|410 Gone' "$log")")
  else
    echo "[toolchain] FAILED: $name after $((SECONDS - start)) s; the end of $log:" >&2
    tail -n 20 "$log" | sed 's/^/    /' >&2
    failed+=("$name")
  fi
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}

link() { if [ -e "$1" ]; then ln -sfn "$1" "$bin_dir/$2"; fi; }

lang_from=$lang_dir
if cli_ext=$(external_pulumi); then
  echo "[toolchain] using the Pulumi CLI at $cli_ext"
  link "$cli_ext" pulumi
  ext_dir=$(dirname "$(readlink -f "$cli_ext")")
  if [ -x "$ext_dir/pulumi-language-python" ]; then lang_from=$ext_dir; fi
fi
if [ "$lang_from" = "$lang_dir" ] && ext=$(external pulumi-language-python); then
  lang_from=$(dirname "$ext")
fi
if [ "$lang_from" = "$lang_dir" ]; then
  if [ ! -d "$lang_dir" ] && [ -n "${lang_note:-}" ]; then echo "[toolchain] $lang_note"; fi
  component pulumi-language-python "$lang_dir" build_language_host
else
  echo "[toolchain] using the Python language host at $lang_from"
fi
if [ "$lang_from" = "$lang_dir" ] && [ "$lang_version" != "$pulumi_version" ]; then
  if [ -d "$lang_dir" ]; then install_host_wrapper; fi
else
  link "$lang_from/pulumi-language-python" pulumi-language-python
fi
link "$lang_from/pulumi-language-python-exec" pulumi-language-python-exec
# A provider on PATH is one the engine takes as it is (an ambient plugin), whatever its version.
# The one built here is installed as a plugin instead (see the end): the engine then takes it at
# the version the SDK asks for, without a warning on every command that it came from PATH.
provider=
if ext=$(external pulumi-resource-kubernetes); then
  echo "[toolchain] using the Kubernetes provider at $ext"
  link "$ext" pulumi-resource-kubernetes
  provider=$ext
else
  rm -f "$bin_dir/pulumi-resource-kubernetes"
  if [ ! -d "$provider_dir" ] && [ -n "${provider_note:-}" ]; then echo "[toolchain] $provider_note"; fi
  component pulumi-resource-kubernetes "$provider_dir" build_provider
  if [ -x "$provider_dir/pulumi-resource-kubernetes" ]; then provider=$provider_dir/pulumi-resource-kubernetes; fi
fi
# The CLI alone runs no program: it is built only when the language host and the provider are here.
if [ -z "$cli_ext" ]; then
  if [ -e "$bin_dir/pulumi-language-python" ] && [ -n "$provider" ]; then
    cli_version=$(cli_build_version)
    cli_dir=$cache/pulumi-v$cli_version
    if [ ! -d "$cli_dir" ] && [ "$cli_version" != "$pulumi_version" ]; then
      echo "[toolchain] the proxy refuses the CLI at the pin v$pulumi_version; building v$cli_version"
    fi
    component pulumi "$cli_dir" build_cli
    # A hard link, not a symlink: the CLI takes the language host beside its own executable
    # (symlinks resolved) without a warning on every command that it came from PATH.
    if [ -x "$cli_dir/pulumi" ]; then ln -f "$cli_dir/pulumi" "$bin_dir/pulumi"; fi
  else
    unavailable+=("pulumi: not built: the Python language host and the Kubernetes provider it needs to run this program are not here")
  fi
fi
component etcd "$etcd_dir" build_etcd
link "$etcd_dir/etcd" etcd
component kubernetes "$kubernetes_dir" build_kubernetes
for b in "${kubernetes_binaries[@]}"; do link "$kubernetes_dir/$b" "$b"; done
component kube-apiserver-$previous_apiserver_version "$previous_apiserver_dir" build_previous_apiserver
link "$previous_apiserver_dir/kube-apiserver" "kube-apiserver-$previous_apiserver_version"
component coredns "$coredns_dir" build_coredns
link "$coredns_dir/coredns" coredns
component actionlint "$actionlint_dir" build_actionlint
link "$actionlint_dir/actionlint" actionlint
component jobset "$jobset_dir" build_jobset
link "$jobset_dir/jobset-manager" jobset-manager
component kueue "$kueue_dir" build_kueue
link "$kueue_dir/kueue-manager" kueue-manager
component volcano "$volcano_dir" build_volcano
link "$volcano_dir/vc-scheduler" vc-scheduler
link "$volcano_dir/volcano-crds" volcano-crds
component kube-router "$kube_router_dir" build_kube_router
link "$kube_router_dir/kube-router" kube-router
component versitygw "$versitygw_dir" build_versitygw
link "$versitygw_dir/versitygw" versitygw
component pulumi-language-yaml "$yaml_dir" build_yaml_host
link "$yaml_dir/pulumi-language-yaml" pulumi-language-yaml

# The engine takes the provider from its plugin directory, so it never tries to download one.
if [ -x "$bin_dir/pulumi" ] && [ -x "$provider_dir/pulumi-resource-kubernetes" ]; then
  if ! "$bin_dir/pulumi" plugin ls --json | python3 -c '
import json, sys
want = ("resource", "kubernetes", sys.argv[1])
sys.exit(0 if any((p["kind"], p["name"], p["version"]) == want for p in json.load(sys.stdin) or []) else 1)
' "$kubernetes_version"; then
    "$bin_dir/pulumi" plugin install resource kubernetes "$kubernetes_version" \
      --file "$provider_dir/pulumi-resource-kubernetes"
  fi
fi

# What the proxy refused, one component a line with its answer, for the tests that need it
# (tests/engine skips with this reason; any other missing tool fails them).
unavailable_file=$bin_dir/UNAVAILABLE
if [ ${#unavailable[@]} -gt 0 ]; then
  printf '%s\n' "${unavailable[@]}" >"$unavailable_file"
  echo "[toolchain] not built, their modules are not served by the Go module proxy: ${unavailable[*]%%:*}" >&2
else
  rm -f "$unavailable_file"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "[toolchain] build failed: ${failed[*]}" >&2
  exit 1  # the build cache stays: the next run rebuilds what failed from it
fi
if [ -d "$GOCACHE" ]; then
  echo "[toolchain] removing Go's build cache of these builds ($(du -sh "$GOCACHE" | cut -f1))"
  rm -rf "$GOCACHE"
fi
echo "[toolchain] ready: $bin_dir"
