"""Work in a forked child that hands this process items while it runs.

A preview's program is one thread of Python. What the preview does with each resource (its
rendering, the pack's rules for it) needs only that resource and the ones before it, so this
process does it on a second core while the program goes on in the child. Items arrive pickled,
a batch at a time: the child appends each batch to a file in memory and says where it is in a
pipe, so it never waits for this process to catch up. Once it has answered, the child can go on
with what needs only its own answer (the program's artifacts, written to disk) while this
process works through the items. Where there is no fork, all of it runs here first.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from .aside import how_it_ended, outcome_of, pickled

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - the item type, beside T

BATCH = 256  # items per pickled frame: few enough frames, soon enough after the item
ITEMS, ANSWER, THEN = 0, 1, 2  # what a frame holds
# What a frame holds, where it is in the file, its length, and when it was written.
_FRAME = struct.Struct("!BQQd")


class ChildEnded(RuntimeError):
    """The child ended before it said all it had to."""


class Stream(Generic[T, I]):
    """`work(send)` started now in a child process: iterating yields what it `send`s, in
    order, as it arrives; `result()` then returns what `work` returned, or raises what it
    raised. `then(answer)` runs in the child after it answered; `join()` waits for it and
    raises what it raised. `close()` ends the child if it still runs."""

    def __init__(self, work: Callable[[Callable[[I], None]], T],
                 then: Callable[[T], None] | None = None) -> None:
        self._answer: tuple[bool, object] | None = None
        self._then: tuple[bool, object] | None = None
        self._items: list[I] = []
        self._pid = 0
        self._has_then = then is not None
        self._has_answered = False
        self._headers: deque[tuple[int, int, int]] = deque()  # read ahead of their items
        self.answered_at = 0.0  # when `work` returned (perf_counter: one clock for both)
        if not hasattr(os, "fork"):
            self._answer = outcome_of(lambda: work(self._items.append))
            self.answered_at, self._has_answered = time.perf_counter(), True
            self._then = _after(self._answer, then)
            return
        for stream in (sys.stdout, sys.stderr):  # or the child would print them again
            stream.flush()
        self._data = _memory_file()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(work, then, self._data, write)
        os.close(write)
        self._pid, self._where = pid, read

    def __iter__(self) -> Iterator[I]:
        if not self._pid:
            yield from self._items
            self._items = []
            return
        while self._answer is None:
            frame = self._frame()
            if frame is None:
                self._stopped()
            elif frame[0] == ITEMS:
                yield from frame[1]  # type: ignore[misc]
            else:
                self._answer = frame[1]  # type: ignore[assignment]

    def result(self) -> T:
        for _ in self:  # what nobody read is dropped
            pass
        assert self._answer is not None
        return _unwrap(self._answer)  # type: ignore[return-value]

    def join(self) -> None:
        self.result()
        if self._has_then and self._then is None and self._pid > 0:
            frame = self._frame()
            if frame is None:
                self._stopped()
            else:
                self._then = frame[1]  # type: ignore[assignment]
        self._wait()
        if self._then is not None:
            _unwrap(self._then)

    def close(self) -> None:
        if self._pid > 0:
            os.kill(self._pid, signal.SIGKILL)
            self._stopped()

    def _stopped(self) -> None:
        """The child has ended: what never came from it is an error saying how it ended."""
        ended = how_it_ended(self._wait())

        def missing(what: str) -> tuple[bool, object]:
            return False, ChildEnded(
                f"the process running the program ended without its {what} ({ended})")

        if self._answer is None:
            self._answer = missing("answer")
        if self._has_then and self._then is None:
            self._then = missing("word that it is done")

    @property
    def answered(self) -> bool:
        """Whether `work` has returned (its answer may still wait behind items)."""
        if self._pid > 0 and not self._has_answered:
            self._read_ready()
        return self._has_answered

    def _read_ready(self) -> None:
        """The headers the pipe holds now, kept in order."""
        while select.select([self._where], [], [], 0)[0]:
            header = _read_exactly(self._where, _FRAME.size)
            if len(header) < _FRAME.size:
                return
            self._note(header)

    def _note(self, header: bytes) -> None:
        kind, offset, size, at = _FRAME.unpack(header)
        if kind == ANSWER:
            self.answered_at, self._has_answered = at, True
        self._headers.append((kind, offset, size))

    def _frame(self) -> tuple[int, object] | None:
        if not self._headers:
            header = _read_exactly(self._where, _FRAME.size)
            if len(header) < _FRAME.size:
                return None
            self._note(header)
        kind, offset, size = self._headers.popleft()
        return kind, pickle.loads(_pread_exactly(self._data, size, offset))

    def _wait(self) -> int:
        pid, self._pid = self._pid, -1
        if pid <= 0:
            return 0
        os.close(self._where)
        os.close(self._data)
        return os.waitpid(pid, 0)[1]


def _unwrap(outcome: tuple[bool, object]) -> object:
    done, value = outcome
    if done:
        return value
    raise value  # type: ignore[misc]


def _after(answer: tuple[bool, object], then: Callable[[T], None] | None
           ) -> tuple[bool, object] | None:
    done, value = answer
    if not done or then is None:
        return None
    return outcome_of(lambda: then(value), traced=True)  # type: ignore[arg-type]


def _memory_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("stream", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as file:  # unlinked already: gone once both close it
        return os.dup(file.fileno())


def _read_exactly(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _pread_exactly(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            raise EOFError("the program's process wrote less than it said")
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _child(work: Callable[[Callable[[I], None]], T], then: Callable[[T], None] | None,
           data: int, where: int) -> None:
    """Run `work`, sending its items in batches and then its answer, then `then`'s outcome;
    never returns."""
    try:
        batch: list[I] = []
        offset = 0

        def frame(kind: int, payload: bytes) -> None:
            nonlocal offset
            view = memoryview(payload)
            while view:
                view = view[os.write(data, view):]
            os.write(where, _FRAME.pack(kind, offset, len(payload), time.perf_counter()))
            offset += len(payload)

        def send(item: I) -> None:
            batch.append(item)
            if len(batch) >= BATCH:
                frame(ITEMS, pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
                batch.clear()

        answer = outcome_of(lambda: work(send), traced=True)
        if batch:
            frame(ITEMS, pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
        frame(ANSWER, pickled(answer))
        after = _after(answer, then)
        if after is not None:
            frame(THEN, pickled(after))
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # leaving whatever happens
                pass
        os._exit(0)
