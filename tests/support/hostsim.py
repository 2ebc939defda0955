"""hostsim, the simulated data centre's SSH server (tools/datacentre): build it, serve a spec
until the test is done, and make what a spec names (ed25519 keys, a free port, a bubblewrap
prefix that gives a host its own root)."""

from __future__ import annotations

import contextlib
import functools
import json
import selectors
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.project import REPO

BUILD = REPO / "tools/datacentre/build.sh"
# A cold build compiles golang.org/x/crypto/ssh (half a minute on two cores, more when loaded).
BUILD_TIMEOUT = 900
# Startup is milliseconds; a loaded two-core machine can stall a process for seconds.
READY_TIMEOUT = 60
STOP_TIMEOUT = 30


def go_missing() -> str | None:
    """Why hostsim cannot be built here, or None."""
    if shutil.which("go") or Path("/usr/local/go/bin/go").is_file():
        return None
    return "Go is not installed (https://go.dev/doc/install puts it in /usr/local/go)"


@functools.cache
def _built() -> Path:
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"tools/datacentre/build.sh failed (exit {proc.returncode}):\n"
                    f"{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def build_hostsim() -> Path:
    """The hostsim binary (built on first use, then from the cache); skips without Go."""
    reason = go_missing()
    if reason:
        pytest.skip(reason)
    return _built()


def stderr_log(spec: Path) -> Path:
    """Where `serve` puts hostsim's stderr: beside the spec."""
    return spec.with_name(spec.stem + ".stderr.log")


@contextlib.contextmanager
def serve(spec: Path, timeout: float = READY_TIMEOUT) -> Iterator[subprocess.Popen[str]]:
    """Run `hostsim SPEC` until the block ends (its stderr beside the spec)."""
    with serving([str(build_hostsim()), str(spec)], stderr_log(spec), "hostsim",
                 timeout) as proc:
        yield proc


@contextlib.contextmanager
def serving(argv: list[str], log: Path, what: str, timeout: float = READY_TIMEOUT,
            cwd: Path | None = None, env: dict[str, str] | None = None
            ) -> Iterator[subprocess.Popen[str]]:
    """Run a stand-in that prints one JSON line with "ready": true once it listens, until the
    block ends; then stop it with SIGTERM (its returncode is set afterwards). Fails the test,
    with its stderr (`log`), if it exits or is not ready in time."""
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, text=True, cwd=cwd, env=env)
    try:
        _wait_ready(proc, log, what, timeout)
        yield proc
    finally:
        stop(proc)


def _wait_ready(proc: subprocess.Popen[str], log: Path, what: str, timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                stop(proc)
                pytest.fail(f"{what} was not ready after {timeout}s:\n{log.read_text()}")
    line = proc.stdout.readline()
    if not line:  # end of file: it exited
        proc.wait(timeout=STOP_TIMEOUT)
        pytest.fail(f"{what} exited {proc.returncode} before it was ready:\n{log.read_text()}")
    assert json.loads(line).get("ready") is True, line


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL if it has not exited in STOP_TIMEOUT seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


def free_port(address: str) -> int:
    """An unprivileged port free on `address` now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def known_host(address: str, port: int, public_key: str) -> str:
    """A known_hosts line pinning `public_key` ("ssh-ed25519 AAAA... [comment]") to address:port."""
    name = address if port == 22 else f"[{address}]:{port}"
    return f"{name} {' '.join(public_key.split()[:2])}\n"


def sandbox_prefix(root: Path) -> list[str]:
    """A bubblewrap argv prefix that gives a host `root` as /host (its working directory) and
    nothing else writable: /usr read-only, fresh /proc and /dev, every namespace unshared (no
    network), every capability dropped, and the sandbox gone when hostsim's child is."""
    return ["bwrap", "--die-with-parent", "--unshare-all", "--unshare-user", "--uid", "0",
            "--gid", "0", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev", "--bind", str(root), "/host",
            "--chdir", "/host", "--"]
