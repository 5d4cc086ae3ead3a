"""The pod's answer to the kubelet's liveness probe: the entrypoint, the container's PID 1, answers
GET /healthz on LIVENESS_PORT from a thread of its own.

Kubernetes calls a pod Running as long as its processes exist. A pod whose every process is
frozen (stuck in the kernel, a hung driver call) stays Running forever, and a world without a spare
waits for it forever: its peers' hang watch tears their world down, and the rendezvous then waits
for a member that cannot come back. Such a pod answers no probe: the kubelet kills it after
workload.liveness.seconds, and the Job replaces it (a StatefulSet's pod restarts in place).
What the answer does not cover is the hang watch's: a rank that runs but makes no progress.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainer import contract


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        found = self.path == contract.LIVENESS_PATH
        body = b"alive\n" if found else b"not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # a probe every few seconds is no log line
        pass


class _DualStackServer(ThreadingHTTPServer):
    """Answers on the pod's IPv4 and IPv6 addresses alike, whichever the kubelet probes."""

    address_family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
    daemon_threads = True

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def answer_liveness_probes(port: int) -> ThreadingHTTPServer:
    """Starts answering on `port` (LIVENESS_PORT), from a daemon thread, for as long as this process runs."""
    server = _DualStackServer(("::" if _DualStackServer.address_family == socket.AF_INET6 else "", port), _Answer)
    threading.Thread(target=server.serve_forever, name="liveness", daemon=True).start()
    return server
