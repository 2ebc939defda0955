"""Work done beside the rest: a function run in a forked copy of this process.

A preview's policy pack reads the plan and nothing the preview writes afterwards, so it can
run on a second core while this process writes `build/` and works out the diff, the runbook
and the impact. A fork shares the plan as it is, without copying it; the answer comes back
pickled through a pipe. Where there is no fork, the work is done at once.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Aside(Generic[T]):
    """`work()`, started now in a child process; `result()` waits for it and returns it, or
    raises what it raised."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._outcome: tuple[bool, object] | None = None
        self._pid = 0
        self._pipe = -1
        if not hasattr(os, "fork"):
            self._outcome = outcome_of(work)
            return
        for stream in (sys.stdout, sys.stderr):  # or the child would print them again
            stream.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, then leave without running the parent's exit hooks
            os.close(read)
            try:
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(pickled(outcome_of(work, traced=True)))
            finally:
                os._exit(0)
        os.close(write)
        self._pid, self._pipe = pid, read

    def result(self) -> T:
        if self._outcome is None:
            with os.fdopen(self._pipe, "rb") as pipe:
                answer = pipe.read()
            _, status = os.waitpid(self._pid, 0)
            if not answer:
                raise RuntimeError(f"the process working aside ended without an answer "
                                   f"({how_it_ended(status)})")
            self._outcome = pickle.loads(answer)
        done, value = self._outcome
        if done:
            return value  # type: ignore[return-value]
        raise value  # type: ignore[misc]


def outcome_of(work: Callable[[], object], traced: bool = False) -> tuple[bool, object]:
    try:
        return True, work()
    except Exception as err:  # handed to whoever waits for the result
        if traced:  # a traceback does not pickle: where it was raised travels as a note
            err.add_note("raised in the process working aside:\n"
                         + "".join(traceback.format_exception(err)).rstrip())
        return False, err


def pickled(outcome: tuple[bool, object]) -> bytes:
    try:
        return pickle.dumps(outcome)
    except Exception:  # an exception that does not pickle still arrives, as text
        _, value = outcome
        text = "".join(traceback.format_exception(value)) if isinstance(value, BaseException) \
            else f"an answer that does not pickle: {value!r}"
        return pickle.dumps((False, RuntimeError(text)))


def how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
