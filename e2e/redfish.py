"""A stand-in for the BMCs' Redfish service: HTTPS on each BMC's loopback address, the admin's
basic auth checked, every request recorded (one JSON line: BMC, method, path, body) so the e2e
can check what `pulumi up` asked of each BMC. It is no BMC: nothing changes but its log.

    python -m e2e.redfish SPEC.json   # prints {"ready": true, "bmcs": N} once all listen

SPEC: {"bmcs": {"gpu-node-00": "127.78.1.100", ...}, "port": 443, "user": "admin",
"passwordFile": ..., "cert": ..., "key": ..., "log": ...}. Every address must be IPv4
loopback (e2e/guard.py); anything else exits 2 before a socket is opened.
"""

from __future__ import annotations

import base64
import hmac
import json
import signal
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from e2e.guard import is_local


def certificates(root: Path, addresses: list[str], names: list[str] | None = None
                 ) -> tuple[Path, Path, Path]:
    """A CA of the run's own and one server certificate for every address and DNS name
    (openssl): (CA certificate, server certificate, server key), as ca.crt, server.crt and
    server.key under `root`. Clients trust the CA alone."""
    root.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (root / n for n in ("ca.key", "ca.crt", "server.key",
                                                    "server.csr", "server.crt"))
    ext = root / "san.ext"
    ext.write_text("subjectAltName=" + ",".join(
        [*(f"IP:{a}" for a in addresses), *(f"DNS:{n}" for n in names or ())]) + "\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)

    run("req", "-x509", "-newkey", "ed25519", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=e2e CA")
    run("req", "-newkey", "ed25519", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=server")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return ca, cert, key


class Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def write(self, line: dict[str, Any]) -> None:
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def handler(bmc: str, credentials: bytes, log: Recorder) -> type[BaseHTTPRequestHandler]:
    expected = b"Basic " + base64.b64encode(credentials)

    class Redfish(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size).decode(errors="replace") if size else ""
            given = (self.headers.get("Authorization") or "").encode()
            authorised = hmac.compare_digest(given, expected)
            log.write({"bmc": bmc, "method": self.command, "path": self.path,
                       "body": json.loads(body) if body.startswith("{") else body,
                       "authorised": authorised})
            status = 200 if authorised else 401
            reply = b"{}" if authorised else b'{"error": "unauthorised"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_PATCH = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:  # the log above is enough
            pass

    return Redfish


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    bmcs: dict[str, str] = spec["bmcs"]
    outside = {name: a for name, a in bmcs.items() if not is_local(a)}
    if outside:
        print(f"redfish: refusing BMCs outside 127.0.0.0/8: {outside}", file=sys.stderr)
        return 2
    password = Path(spec["passwordFile"]).read_text().rstrip("\n")
    credentials = f"{spec['user']}:{password}".encode()
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(spec["cert"], spec["key"])
    log = Recorder(Path(spec["log"]))
    servers = []
    for name, address in sorted(bmcs.items()):
        server = ThreadingHTTPServer((address, int(spec.get("port", 443))),
                                    handler(name, credentials, log))
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        servers.append(server)
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"ready": True, "bmcs": len(servers)}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    for server in servers:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
