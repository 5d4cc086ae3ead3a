"""A real, throwaway Kubernetes API server for tests: etcd + kube-apiserver on loopback ports.

    from toolchain.apiserver import LocalApiServer

    with LocalApiServer() as api:
        api.kubectl("apply", "--dry-run=server", "-f", "manifests.yaml")
        # or: subprocess.run(["kubectl", "--kubeconfig", api.kubeconfig, ...])

Nothing runs but the API server and its etcd (no scheduler, controllers or nodes): objects are
validated, defaulted, admitted and stored, never acted on. Authentication is a bearer token,
authorization AlwaysAllow (or RBAC, asked for), and the ServiceAccount admission plugin is off, since no controller
creates the `default` service accounts it would require. Everything lives in a temporary
directory that is removed on exit, together with both processes.

The binaries come from toolchain/build.sh (its --bin-dir), else from PATH.

    python -m toolchain.apiserver --selftest

Its certificates and command lines are the local cluster's (certificates.py and
control_plane.py beside it).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from . import certificates, control_plane

TOOLCHAIN = Path(__file__).resolve().parents[1]


def free_ports(count):
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on now: each is held until all
    are chosen, so none is handed out twice. Another process may still take one before its user
    binds it (see LocalApiServer.start)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    return free_ports(1)[0]


class PortTaken(RuntimeError):
    """A daemon could not bind the port chosen for it: another process took it meanwhile."""


# How many times start() chooses its ports again when one was taken before etcd or the API server bound it.
START_ATTEMPTS = 3


def tool_dir():
    """Where toolchain/build.sh puts the binaries it builds."""
    out = subprocess.run([str(TOOLCHAIN / "build.sh"), "--bin-dir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def find_tool(name, bin_dir):
    """bin_dir/name if it is there, else name on PATH."""
    candidate = Path(bin_dir) / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} is neither in {bin_dir} nor on PATH: run `make setup` (toolchain/build.sh)")
    return found


def previous_apiserver(bin_dir) -> str:
    """The API server of the Kubernetes release before the cluster's, which toolchain/build.sh puts
    beside the cluster's as kube-apiserver-<version>."""
    found = sorted(Path(bin_dir).glob(control_plane.PREVIOUS_APISERVER_PREFIX + "[0-9]*"))
    if not found:
        raise FileNotFoundError(f"no {control_plane.PREVIOUS_APISERVER_PREFIX}<version> in {bin_dir}: run `make setup` (toolchain/build.sh)")
    return str(found[-1])


class LocalApiServer:
    """Starts etcd and kube-apiserver on free 127.0.0.1 ports; a context manager.

    Arguments:
      bin_dir: where etcd and kube-apiserver are (default: toolchain/build.sh --bin-dir, then PATH);
      previous_release: run the API server of the Kubernetes release before the cluster's (previous_apiserver).
      startup_timeout: seconds to wait for /readyz before giving up.
      kubectl: the kubectl the `kubectl()` helper runs.
      users: more bearer tokens it accepts, each with its user and group ({token: (user, group)});
      rbac: authorize with RBAC (the admin's group, system:masters, is allowed everything) rather
        than AlwaysAllow, for tests of what a user may not do.

    Attributes, once started:
      kubeconfig: path of a kubeconfig file (context `local`) for the server;
      server: its https URL; token: the bearer token it accepts (user `admin`, system:masters);
      ca_file: the CA file that verifies its serving certificate;
      startup_seconds: how long start() took; workdir: the temporary directory.
    """

    def __init__(self, bin_dir=None, startup_timeout=90.0, kubectl="kubectl", workload_api=True, users=None, rbac=False,
                 previous_release=False):
        bin_dir = bin_dir or tool_dir()
        self._etcd_bin = find_tool("etcd", bin_dir)
        self._apiserver_bin = previous_apiserver(bin_dir) if previous_release else find_tool("kube-apiserver", bin_dir)
        self._kubectl = kubectl
        self.startup_timeout = startup_timeout
        self.token = "ddp-infra-test-token"
        self.workdir = self.kubeconfig = self.server = self.ca_file = None
        self.startup_seconds = None
        self._procs = []
        # the local cluster's Workload API (control_plane.WORKLOAD_API_FLAGS; the release before's with
        # previous_release), or an API server without it
        self._workload_api_flags = workload_api and (control_plane.PREVIOUS_WORKLOAD_API_FLAGS if previous_release
                                               else control_plane.WORKLOAD_API_FLAGS)
        self._users, self._rbac = dict(users or {}), rbac

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        began = time.monotonic()
        self.workdir = Path(tempfile.mkdtemp(prefix="ddp-infra-apiserver-"))
        try:
            for attempt in range(1, START_ATTEMPTS + 1):
                client, peer, port = free_ports(3)
                try:
                    self._start_etcd(client, peer)
                    self._start_apiserver(f"http://127.0.0.1:{client}", port)
                    self._wait_ready(began + self.startup_timeout)
                    break
                except PortTaken:
                    if attempt == START_ATTEMPTS:
                        raise
                    self._end_processes()
                    shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
            self.kubeconfig = str(self.workdir / "kubeconfig")
            certificates.write_kubeconfig(Path(self.kubeconfig), "local", self.server, Path(self.ca_file), self.token)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self):
        self._end_processes()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _end_processes(self):
        # kube-apiserver first: without etcd its graceful shutdown stalls until killed.
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs = []

    def kubeconfig_of(self, token, path):
        """Writes a kubeconfig (context `local`) that authenticates with `token` to `path`."""
        certificates.write_kubeconfig(Path(path), "local", self.server, Path(self.ca_file), token)
        return str(path)

    def kubectl(self, *args, input=None, check=True):
        """Runs kubectl against this server; returns the CompletedProcess (text output)."""
        proc = subprocess.run(
            [self._kubectl, "--kubeconfig", self.kubeconfig, *args],
            input=input, capture_output=True, text=True,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def _spawn(self, name, argv):
        with open(self.workdir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc.log_path = log.name
        self._procs.append(proc)

    def _start_etcd(self, client, peer):
        self._spawn("etcd", control_plane.etcd_argv(self._etcd_bin, self.workdir / "etcd", client, peer))

    def _start_apiserver(self, etcd_url, port):
        self.server = f"https://127.0.0.1:{port}"
        pki = self.workdir
        self.ca_file = str(certificates.make_ca(pki, "ddp-infra-test-ca", days=2))
        key, cert = certificates.sign_serving(pki, "serving", "127.0.0.1", ["IP:127.0.0.1", "DNS:localhost"], days=2)
        self._spawn("kube-apiserver", control_plane.apiserver_argv(
            self._apiserver_bin, etcd_url=etcd_url, bind="127.0.0.1", advertise="127.0.0.1", port=port, cert=cert, key=key,
            tokens=certificates.token_file(pki / "tokens.csv", {self.token: ("admin", "system:masters"), **self._users}),
            service_account_key=certificates.service_account_key(pki),
            issuer="https://kubernetes.default.svc.cluster.local", service_cidr="10.0.0.0/24",
            # No endpoints of the `kubernetes` Service: no pod runs here to reach it, and from 1.37 the
            # reconciler refuses a loopback address.
            extra=["--endpoint-reconciler-type", "none",
                   "--cert-dir", str(pki / "certs"), "--authorization-mode", "RBAC" if self._rbac else "AlwaysAllow",
                   "--disable-admission-plugins", "ServiceAccount", "--allow-privileged",
                   *(self._workload_api_flags or [])],
        ))  # fmt: skip

    def _wait_ready(self, deadline):
        last = "no answer yet"
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    tail = self._log_tail(proc)
                    error = PortTaken if "address already in use" in tail else RuntimeError
                    raise error(f"{proc.args[0]} exited ({proc.returncode}):\n{tail}")
            try:
                if control_plane.ready(self.server, Path(self.ca_file), self.token):
                    return
                last = "/readyz answered with an error status"
            except OSError as e:
                last = str(e)
            time.sleep(0.25)
        raise TimeoutError(f"kube-apiserver not ready after {self.startup_timeout} s: {last}")

    @staticmethod
    def _log_tail(proc):
        return Path(proc.log_path).read_text(errors="replace")[-3000:]


SELFTEST_MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata:
  name: ddp-selftest
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ddp-selftest
  namespace: ddp-selftest
data:
  world_size: "4"
"""


def selftest():
    with LocalApiServer() as api:
        print(f"[apiserver] ready at {api.server} in {api.startup_seconds:.1f} s; kubeconfig {api.kubeconfig}")
        print(api.kubectl("version").stdout.strip())
        out = api.kubectl("apply", "--dry-run=client", "-f", "-", input=SELFTEST_MANIFEST).stdout
        print(f"[apiserver] --dry-run=client:\n{out.strip()}")
        # A server-side dry run creates nothing, so the ConfigMap's namespace must exist first.
        api.kubectl("create", "namespace", "ddp-selftest")
        out = api.kubectl("apply", "--dry-run=server", "-f", "-", input=SELFTEST_MANIFEST).stdout
        print(f"[apiserver] --dry-run=server:\n{out.strip()}")
        assert api.kubectl("get", "configmap", "ddp-selftest", "-n", "ddp-selftest", check=False).returncode != 0
        api.kubectl("apply", "-f", "-", input=SELFTEST_MANIFEST)
        got = json.loads(api.kubectl("get", "configmap", "ddp-selftest", "-n", "ddp-selftest", "-o", "json").stdout)
        assert got["data"] == {"world_size": "4"}, got
        print("[apiserver] applied and read back the ConfigMap")
        workdir = api.workdir
        procs = list(api._procs)
    assert not workdir.exists(), f"{workdir} left behind"
    assert all(p.poll() is not None for p in procs), "a process outlived the server"
    print("[apiserver] selftest passed: stopped, nothing left behind")


def main():
    parser = argparse.ArgumentParser(description="A throwaway local Kubernetes API server for tests.")
    parser.add_argument("--selftest", action="store_true", help="start it, apply a Namespace and a ConfigMap, stop it")
    args = parser.parse_args()
    if not args.selftest:
        parser.print_help()
        return 2
    selftest()
    return 0


