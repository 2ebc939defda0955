"""A stand-in for the admission webhooks the charts install, whose servers would run in pods
(cert-manager's, MetalLB's, ingress-nginx's, the Prometheus operator's, Volcano's): on
simulated nodes those pods run no process. A webhook whose process does run on this machine
(the Training Operator's) is relayed to it.

The API server reaches it as its HTTPS proxy: it asks to CONNECT to the webhook's Service
(`<service>.<namespace>.svc:<port>`), which the stand-in answers itself, with a certificate
for `*.<namespace>.svc` that its CA signed (the API server trusts that CA, as it trusts the
caBundle the charts' certificate jobs and injectors would set). So nothing the API server
dials for a webhook leaves this machine, and a webhook is answered from the moment its
configuration exists. Every AdmissionReview is allowed unchanged and recorded (one JSON line:
service, path, operation, kind, namespace/name, dry run). It judges nothing: what the real
webhook would refuse is not refused here (docs/testing.md)."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from e2e.guard import is_local
from e2e.redfish import Recorder, certificates


def review_reply(review: dict[str, Any]) -> dict[str, Any]:
    """Allowed, no patch: the AdmissionReview response for `review`'s request."""
    return {"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True}}


def _handler(tls: ssl.SSLContext, log: Recorder, relays: Mapping[str, tuple[str, int]]
             ) -> type[BaseHTTPRequestHandler]:
    class Admission(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the API server keeps its connection to a webhook
        service = ""

        def do_CONNECT(self) -> None:
            """The tunnel to `service:port`: the webhook's own process where one runs here
            (`relays`), else this stand-in is the far end of it."""
            self.service = self.path
            if self.path in relays:
                return self._relay(relays[self.path])
            self.send_response(200, "Connection established")
            self.end_headers()
            self.connection = tls.wrap_socket(self.connection, server_side=True)
            self.rfile = self.connection.makefile("rb", self.rbufsize)
            self.wfile = self.connection.makefile("wb", 0)

        def _relay(self, target: tuple[str, int]) -> None:
            """Bytes both ways between the API server and the process (its own TLS)."""
            assert is_local(target[0]), f"a webhook process off this machine: {target}"
            with socket.create_connection(target, timeout=10) as far:
                self.send_response(200, "Connection established")
                self.end_headers()
                near = self.connection
                done = threading.Event()

                def pump(src: socket.socket, dst: socket.socket) -> None:
                    with contextlib.suppress(OSError):
                        while chunk := src.recv(65536):
                            dst.sendall(chunk)
                    done.set()
                threading.Thread(target=pump, args=(far, near), daemon=True).start()
                pump(near, far)
                done.wait(10)
            self.close_connection = True

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            review = json.loads(self.rfile.read(size))
            request = review["request"]
            log.write({"service": self.service, "path": self.path.partition("?")[0],
                       "operation": request.get("operation"),
                       "kind": request.get("kind", {}).get("kind"),
                       "namespace": request.get("namespace") or "",
                       "name": request.get("name") or "",
                       "dryRun": bool(request.get("dryRun"))})
            self._reply(200, review_reply(review))

        def do_GET(self) -> None:
            """Not a webhook (an aggregated API's discovery): nothing serves it."""
            self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "code": 404, "message": f"the admission stand-in serves "
                              f"webhooks only, not {self.service}{self.path}"})

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # the log above is enough
            pass

    return Admission


@contextlib.contextmanager
def serving(address: str, namespaces: list[str], work: Path, log: Path,
            relays: Mapping[str, tuple[str, int]]) -> Iterator[tuple[str, Path]]:
    """The stand-in on `address` (loopback, a free port) for the webhooks of Services in
    `namespaces`, for the block: yields the proxy URL the API server is given and the CA
    certificate it trusts for them. A webhook whose process runs on this machine is reached
    there: `relays` maps its `<service>.<namespace>.svc:<port>` to the process's address (read
    at each connection, so a process can be added while it serves)."""
    assert is_local(address), f"the admission stand-in listens on loopback only, not {address}"
    ca, cert, key = certificates(work, [], [f"*.{ns}.svc" for ns in sorted(namespaces)])
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = ThreadingHTTPServer((address, 0), _handler(tls, Recorder(log), relays))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="admission", daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}", ca
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
