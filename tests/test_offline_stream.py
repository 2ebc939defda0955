"""The preview's program runs in a child that streams its registrations here; what is built of
them as they arrive (the plan, the pack's verdict) is what building them all at once gives."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.project import REPO

from offline import stream
from offline.model import PlanBuilder, build_plan
from offline.policy import PackRun, load_config_file, load_pack, run_policies
from offline.preview import Staging
from offline.runtime import Registration, run_program
from offline.stackconfig import load_stack_config
from offline.stream import Stream


def _count(n: int) -> Callable[[Callable[[int], None]], tuple[str, int]]:
    def work(send: Callable[[int], None]) -> tuple[str, int]:
        for i in range(n):
            send(i)
        return "done", os.getpid()
    return work


def test_items_arrive_in_order_from_another_process_then_the_answer() -> None:
    n = stream.BATCH * 3 + 7  # whole batches and a last partial one
    program = Stream(_count(n))
    assert list(program) == list(range(n))
    answer, pid = program.result()
    assert answer == "done" and pid != os.getpid()
    assert program.answered and program.answered_at <= time.perf_counter()


def test_the_answer_is_known_before_the_items_queued_ahead_of_it_are_read() -> None:
    program = Stream(_count(stream.BATCH * 2))
    deadline = time.monotonic() + 60
    while not program.answered:  # the child is done; nothing has been read yet
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert list(program) == list(range(stream.BATCH * 2))


def _fails(send: Callable[[int], None]) -> None:
    send(1)
    raise ValueError("the program's own error")


def test_an_error_in_the_child_is_raised_here_with_where_it_was_raised() -> None:
    program = Stream(_fails)
    assert list(program) == [1]
    with pytest.raises(ValueError, match="the program's own error") as caught:
        program.result()
    assert any("in _fails" in note for note in getattr(caught.value, "__notes__", []))


def test_a_child_killed_midway_is_an_error_not_a_short_answer() -> None:
    def work(send: Callable[[int], None]) -> None:
        for i in range(stream.BATCH):
            send(i)
        os.kill(os.getpid(), signal.SIGKILL)

    program = Stream(work)
    assert list(program) == list(range(stream.BATCH))
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        program.result()


def test_then_runs_in_the_child_after_it_answered_and_join_waits_for_it(tmp_path: Path
                                                                         ) -> None:
    mark = tmp_path / "written"

    def then(answer: tuple[str, int]) -> None:
        time.sleep(0.3)
        mark.write_text(f"{answer[0]} {os.getpid()}")

    program = Stream(_count(3), then=then)
    assert program.result()[0] == "done"
    program.join()
    text, pid = mark.read_text().split()
    assert text == "done" and int(pid) != os.getpid()


def test_a_failure_after_the_answer_is_raised_by_join() -> None:
    def then(_: object) -> None:
        raise OSError("disk full")

    program = Stream(_count(3), then=then)
    assert program.result()[0] == "done"
    with pytest.raises(OSError, match="disk full"):
        program.join()


def test_close_stops_a_child_still_at_work() -> None:
    def work(send: Callable[[int], None]) -> None:
        time.sleep(60)

    start = time.monotonic()
    program = Stream(work)
    program.close()
    assert time.monotonic() - start < 30
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        program.result()


def test_without_fork_the_work_runs_here_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    ran: list[int] = []
    program = Stream(_count(5), then=lambda answer: ran.append(answer[1]))
    assert ran == [os.getpid()]  # already, before anything was read
    assert list(program) == list(range(5))
    assert program.result() == ("done", os.getpid())
    program.join()


@pytest.fixture(scope="module")
def prod_registrations() -> list[Registration]:
    """prod's program run in a child: the runtime is process-global, this process stays
    clean."""
    cfg = load_stack_config(REPO, "prod")

    def work(send: Callable[[Registration], None]) -> None:
        run_program(REPO, cfg, on_register=send)

    program: Stream[None, Registration] = Stream(work)
    regs = list(program)
    program.result()
    return regs


def test_the_plan_built_as_resources_arrive_is_the_plan_built_at_once(
        prod_registrations: list[Registration]) -> None:
    builder = PlanBuilder("gpu-cluster", "prod", str(REPO))
    for reg in prod_registrations:
        builder.add(reg)
    streamed, whole = builder.plan(), build_plan("gpu-cluster", "prod", prod_registrations,
                                                 str(REPO))
    assert [r.document() for r in streamed.resources] == \
        [r.document() for r in whole.resources]
    assert streamed.secret_strings == whole.secret_strings
    assert {r.layer for r in streamed.resources} >= {"hardware", "fabric", "bootstrap"}


def test_a_parent_registered_after_its_child_still_gives_the_childs_layer(
        prod_registrations: list[Registration]) -> None:
    # The SDK registers a parent first; were it not so, the plan is made again, whole.
    child = next(r for r in prod_registrations if r.name.endswith("-prepare"))
    order = [r for r in prod_registrations if r.urn != child.parent] + \
        [r for r in prod_registrations if r.urn == child.parent]
    builder = PlanBuilder("gpu-cluster", "prod", str(REPO))
    for reg in order:
        builder.add(reg)
    assert builder.plan().by_urn[child.urn].layer == "hardware"


def test_the_pack_judging_resources_as_they_arrive_finds_what_it_finds_at_once(
        prod_registrations: list[Registration]) -> None:
    plan = build_plan("gpu-cluster", "prod", prod_registrations, str(REPO))
    pack = load_pack(REPO / "policies")
    assert pack is not None
    config = load_config_file(REPO / "policies" / "policy-config.prod.json")
    at_once = run_policies(plan, pack, config)
    # Registration order, half of them left for the end, as the preview does once the
    # program has answered.
    run = PackRun(pack, config, plan.by_urn)
    arrived = [plan.by_urn[r.urn] for r in prod_registrations]
    half = len(arrived) // 2
    for res in arrived[:half]:
        run.resource(res)
    for res in arrived[half:]:
        run.later(res)
    assert run.finish(plan) == at_once
    assert any(v.level == "suppressed" for v in at_once)  # prod's suppressions came through


def test_a_tree_written_from_two_processes_replaces_the_old_one_whole(tmp_path: Path) -> None:
    root = tmp_path / "build" / "prod"
    root.mkdir(parents=True)
    (root / "stale.txt").write_text("from the last preview")
    staging = Staging(root)
    program = Stream(_count(1), then=lambda _: staging.write({"scripts/a/prepare.sh": "a"}))
    program.result()
    staging.write({"plan.json": "{}"})
    program.join()
    assert (root / "stale.txt").exists()  # nothing replaced until all is written
    staging.commit()
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == \
        ["plan.json", "scripts/a/prepare.sh"]
    assert os.access(root / "scripts/a/prepare.sh", os.X_OK)
    assert [p.name for p in root.parent.iterdir()] == ["prod"]


def test_a_dropped_tree_leaves_the_old_one_and_no_trace(tmp_path: Path) -> None:
    root = tmp_path / "build" / "prod"
    staging = Staging(root)
    staging.write({"plan.json": "{}"})
    staging.drop()
    assert not (tmp_path / "build").exists()  # build/ itself was made for it
