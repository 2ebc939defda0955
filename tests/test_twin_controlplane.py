"""How the twin's control plane gives its processes ports, without the built binaries: a port
is picked where no outgoing connection takes one, and a process that finds its port taken
before it could bind it is started again on another one."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from twin.controlplane import ControlPlane, ControlPlaneError, _ephemeral_range, free_port

# Stands in for a built binary: the first time (no MARKER yet) it finds its port taken, as Go
# says it; later it listens on the port it is given.
LISTENER = f"""#!{sys.executable}
import pathlib, socket, sys, time
port, marker = int(sys.argv[1]), pathlib.Path(sys.argv[2])
if not marker.exists():
    marker.touch()
    sys.exit(f"listen tcp 127.0.0.1:{{port}}: bind: address already in use")
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
time.sleep(600)
"""


def test_a_free_port_is_below_the_ephemeral_range() -> None:
    lo, _hi = _ephemeral_range()
    for _ in range(20):
        port = free_port()
        assert (port < lo) if lo > 11000 else port > 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # and free


@pytest.fixture
def plane(tmp_path: Path) -> ControlPlane:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "listener").write_text(LISTENER)
    (tmp_path / "bin" / "listener").chmod(0o755)
    (tmp_path / "bin" / "fails").write_text("#!/bin/sh\necho 'no config' >&2\nexit 3\n")
    (tmp_path / "bin" / "fails").chmod(0o755)
    (tmp_path / "work").mkdir()
    return ControlPlane(tmp_path / "bin", tmp_path / "work")


def test_a_process_whose_port_was_taken_starts_again_on_another(plane: ControlPlane,
                                                                 tmp_path: Path) -> None:
    marker = tmp_path / "tried"
    try:
        (port,) = plane.spawn_listening("listener", lambda p: [str(p), str(marker)],
                                        timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert [name for name, _ in plane.procs] == ["listener"]
        log = (plane.work / "listener.log").read_text()
        assert "address already in use" in log  # the first try's words are kept
    finally:
        plane.stop()
    assert plane.procs == []


def test_a_process_that_fails_otherwise_stops_the_twin(plane: ControlPlane) -> None:
    with pytest.raises(ControlPlaneError, match="fails exited with 3:\nno config"):
        plane.spawn_listening("fails", lambda p: [str(p)], timeout=60)
