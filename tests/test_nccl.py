"""The NCCL acceptance gate: the floors, the test's environment, and the checker on recorded
outputs (tests/data/nccl/, README there).

Expected values come from the hardware and the public figures docs/acceptance.md cites, not
from the code under test: an H100 node has 8 NDR rails; NCCL's maintainers quote 46-48 GB/s
of Ring all-reduce bus bandwidth per NDR NIC (the floor takes 46: 8 x 46 = 368 GB/s); NVLink
under Ring gives ~370 GB/s; NVIDIA's certification passes ib_write_bw at 90 % of the port rate
(400 Gb/s -> 360 Gb/s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.sandbox import prod_cluster
from support.stack_edits import prod_with_rows

from components.planning import acceptance, nccl, training, workloads

DATA = Path(__file__).resolve().parent / "data" / "nccl"
RANKS, NODES, RAILS = 64, 8, 8
NDR_RAIL_GBS = 46.0  # NCCL maintainers: "For NDR @ 400Gbps you should see 46-48GB/s per NIC"
FLOOR = RAILS * NDR_RAIL_GBS  # 368 GB/s
RAIL_FLOOR = 0.9 * 400  # ib_write_bw, Gb/s
DGX_H100_HCAS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
SHELLCHECK = shutil.which("shellcheck")


def run(name: str, floor: float = FLOOR, ranks: int = RANKS, nodes: int = NODES) -> list[str]:
    return nccl.check((DATA / name).read_text(), ranks, floor, nodes)


def rails(name: str, nodes: int = NODES) -> list[str]:
    return nccl.check_rails((DATA / name).read_text(), nodes, RAILS, RAIL_FLOOR)


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def containers(obj: dict) -> list[dict]:
    spec = obj["spec"]
    replicas = spec.get("mpiReplicaSpecs") or spec.get("pytorchReplicaSpecs") or {}
    return [c for r in replicas.values() for c in r["template"]["spec"]["containers"]]


def launcher_command(cluster) -> str:
    job = acceptance.nccl_test_mpijob(cluster, cluster.workloads.nccl_test)
    return job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
        "args"][0]


# ---------------------------------------------------------------- the floors


def test_floor_is_rails_times_what_an_ndr_rail_delivers():
    assert nccl.nic_bandwidth_gbs(8, 400) == 400.0  # line rate, not the floor
    assert nccl.rail_busbw_gbs(8, 400) == FLOOR == 368.0
    assert nccl.busbw_floor_gbs(8, 8, 400, 1.0) == FLOOR
    assert nccl.busbw_floor_gbs(8, 4, 400, 1.0) == 4 * NDR_RAIL_GBS
    # One node: NVLink under Ring (~370 GB/s), not the 450 GB/s line rate or NVLS's ~480.
    assert nccl.busbw_floor_gbs(1, 8, 400, 1.0) == 370.0
    assert nccl.rail_floor_gbps(400) == RAIL_FLOOR == 360.0
    with pytest.raises(ValueError, match="800 Gb/s"):
        nccl.rail_busbw_gbs(8, 800)


def test_prod_gate_has_headroom_under_the_healthy_band_and_fails_a_lost_rail():
    """Healthy 8-rail NDR nodes measure 368-396 GB/s (46-49.5 GB/s per NIC, the maintainers'
    figures): a floor at 368 fails a healthy node on run-to-run noise. Seven rails deliver at
    most 7 x 49.5 = 346.5 GB/s: the floor stays above that, so a node that lost a rail fails."""
    c = prod_cluster()
    test = c.workloads.nccl_test
    floor = acceptance.nccl_floor_gbs(c, test)
    top_per_rail = nccl.NDR_RING_BUSBW_TOP_GBS / RAILS
    assert (RAILS - 1) * top_per_rail < floor < FLOOR
    assert floor == 357.0
    assert acceptance.rail_floor_gbps(c) == RAIL_FLOOR
    script = acceptance.nccl_gate_script(c, test)
    # A run over more than one node: every rail and the rails' floor; on one node, NVLink's.
    assert "rails=8 floor=357.0\nelse\n  rails=0 floor=358.9\n" in script
    assert '--min-busbw "$floor" --min-bytes 1073741824 --algo Ring --rails "$rails" \\\n' \
        "    --min-rail-gbps 360.0" in script


# ---------------------------------------------------------------- NCCL_ALGO=Ring


def test_ring_is_set_for_the_acceptance_test_only():
    c = prod_cluster()
    test = acceptance.nccl_test_mpijob(c, c.workloads.nccl_test)
    for container in containers(test):  # launcher and workers
        env = env_of(container)
        assert env["NCCL_ALGO"] == "Ring"
        assert "ENV" in env["NCCL_DEBUG_SUBSYS"].split(",")  # NCCL prints the ALGO line there
    assert "-x NCCL_ALGO " in launcher_command(c)  # mpirun forwards it to every rank
    jobs = list(c.workloads.training)
    jobs += [j.model_copy(update={"launcher": "mpijob"}) for j in jobs]
    objs = [o for j in jobs for o in training.training_objects(c, j)]
    assert {o["kind"] for o in objs} == {"PyTorchJob", "MPIJob"}
    for obj in objs:
        for container in containers(obj):
            assert "NCCL_ALGO" not in env_of(container)
            assert "NCCL_ALGO" not in " ".join(container.get("args", []))
    assert "NCCL_ALGO" not in {e["name"] for e in workloads.nccl_env(c)}


def test_checker_fails_a_run_that_is_not_ring():
    good = (DATA / "good-8node.log").read_text()
    line = "NCCL INFO NCCL_ALGO set by environment to Ring"
    assert line in good and nccl.parse(good).algos == ["Ring"]
    assert nccl.check(good, RANKS, FLOOR, NODES) == []
    for value in ("ring", "allreduce:ring"):
        assert nccl.check(good.replace("to Ring", f"to {value}"), RANKS, FLOOR, NODES) == []
    for value in ("NVLSTree", "Tree", "ring,tree", "^nvls"):
        problems = nccl.check(good.replace("to Ring", f"to {value}"), RANKS, FLOOR, NODES)
        assert problems == [f"NCCL ran with NCCL_ALGO={value}, not Ring: only Ring bus "
                            "bandwidth is what crosses the rails"]
    # No line at all: NCCL chose (NVLS/NVLSTree on H100); today's rendering set no NCCL_ALGO.
    missing = "\n".join(x for x in good.splitlines() if "NCCL_ALGO" not in x)
    (problem,) = nccl.check(missing, RANKS, FLOOR, NODES)
    assert problem.startswith("NCCL's log does not show NCCL_ALGO=Ring")
    assert nccl.check(missing, RANKS, FLOOR, NODES, algo=None) == []


# ---------------------------------------------------------------- all_reduce_perf


def test_good_run_passes():
    assert run("good-8node.log") == []
    r = nccl.parse((DATA / "good-8node.log").read_text())
    assert len(r.ranks) == 64 and len(set(r.ranks.values())) == 8
    assert r.networks == {"IB"}
    assert max(row.busbw for row in r.rows if row.size == 4 << 30) == pytest.approx(371.8)


@pytest.mark.parametrize("name, says", [
    ("socket-fallback.log", "NET/Socket"),
    ("gdr-disabled.log", "GPUDirect RDMA disabled"),
    ("gdr-missing-in-channels.log", "without /GDRDMA"),
    ("low-bandwidth.log", "below the fabric floor 368.0"),
    ("missing-rank.log", "missing ranks 61"),
])
def test_each_bad_run_fails_for_its_reason(name, says):
    problems = run(name)
    assert problems, f"{name} passed"
    assert any(says in p for p in problems), problems


def test_missing_rank_is_the_only_problem_of_an_otherwise_good_run():
    assert run("missing-rank.log") == [
        "63 of 64 ranks reported; missing ranks 61 (a node or GPU is not in the run)"]


def test_socket_fallback_fails_even_with_a_lenient_floor():
    assert any("NET/Socket" in p for p in run("socket-fallback.log", floor=1.0))


def test_a_fabric_at_half_its_rate_is_below_the_floor():
    """150-180 GB/s at 1-4 GB, a figure often quoted as "expected" for 8 H100 nodes, is under
    half of 368 GB/s. Even the lowest efficiency the config accepts (0.5) fails it."""
    assert run("half-rate-fabric.log") == [
        "bus bandwidth 180.1 GB/s at 4294967296 bytes is below the fabric floor 368.0 GB/s"]
    assert run("half-rate-fabric.log", floor=nccl.busbw_floor_gbs(8, 8, 400, 0.5)) != []
    assert run("half-rate-fabric.log", floor=nccl.busbw_floor_gbs(8, 8, 400, 0.48)) == []


def test_wrong_results_fail():
    text = (DATA / "good-8node.log").read_text().replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    assert any("wrong results" in p for p in nccl.check(text, RANKS, FLOOR, NODES))


def test_truncated_run_fails():
    text = (DATA / "good-8node.log").read_text()
    head = text[: text.index("  1073741824")]
    assert any(">= 1073741824 bytes" in p for p in nccl.check(head, RANKS, FLOOR, NODES))


# ---------------------------------------------------------------- per-rail ib_write_bw


def test_ib_write_bw_report_is_parsed():
    """perftest's RESULT_FMT_G header and REPORT_FMT row (src/perftest_parameters.h): size,
    iterations, peak (0.00 with -D), average, message rate; the average is what counts."""
    report = (DATA / "ib_write_bw-ndr-client.txt").read_text().splitlines()
    assert report[-3].split() == ["#bytes", "#iterations", "BW", "peak[Gb/sec]", "BW",
                                  "average[Gb/sec]", "MsgRate[Mpps]"]
    size, iters, peak, avg, rate = report[-2].split()
    assert (size, peak) == ("65536", "0.00")
    assert nccl.parse_ib_write_bw(report) == float(avg) == pytest.approx(
        float(rate) * 1e6 * 65536 * 8 / 1e9, abs=0.01)
    assert int(iters) == pytest.approx(float(rate) * 1e6 * 10, abs=1)  # -D 10
    # Without --report_gbits perftest reports MB/sec (0x100000 bytes): converted to Gb/s.
    mb = [" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
          " 65536      5000             46721.35            46711.21\t\t   0.747379"]
    assert nccl.parse_ib_write_bw(mb) == pytest.approx(391.84, abs=0.01)
    assert nccl.parse_ib_write_bw(report[:-3]) is None  # no result row: no figure
    assert nccl.parse_ib_write_bw([" Couldn't set the link layer"]) is None


def test_every_rail_of_a_healthy_fabric_passes():
    text = (DATA / "rails-8node.log").read_text()
    r = nccl.parse_rails(text)
    assert len(r.runs) == NODES * RAILS and not r.errors
    assert {(run.rail, run.client_hca) for run in r.runs} == set(enumerate(DGX_H100_HCAS))
    assert min(run.gbps or 0 for run in r.runs) == pytest.approx(386.0)
    assert rails("rails-8node.log") == []
    assert nccl.rails_summary(text).startswith("rails: 64 of 64 ib_write_bw runs")


def test_a_slow_rail_is_named_with_its_node_pair_and_hca():
    """gpu-node-04's rail 2 (mlx5_4) trained at HDR: slow into it and out of it."""
    assert rails("rails-slow-rail.log") == [
        "rail 2 (mlx5_4): gpu-node-03 -> gpu-node-04: ib_write_bw 195.5 Gb/s, below the "
        "360 Gb/s floor",
        "rail 2 (mlx5_4): gpu-node-04 -> gpu-node-05: ib_write_bw 195.8 Gb/s, below the "
        "360 Gb/s floor",
        "suspect: gpu-node-04 rail 2 (mlx5_4) is bad both as client and as server: check "
        "that HCA, its cable and its leaf port"]
    # The all-reduce of the same run could still pass: the rails are judged on their own.
    assert nccl.check((DATA / "good-8node.log").read_text(), RANKS, FLOOR, NODES) == []


def test_a_port_that_is_down_is_named():
    problems = rails("rails-port-down.log")
    assert problems[:3] == [
        "rail 6 (mlx5_10): gpu-node-05 -> gpu-node-06: no ib_write_bw result (exit 1: Unable "
        "to init the socket connection)",
        "rail 6 (mlx5_10): gpu-node-06 -> gpu-node-07: no ib_write_bw result (exit 1: "
        "Couldn't set the link layer)",
        "suspect: gpu-node-06 rail 6 (mlx5_10) is bad both as client and as server: check "
        "that HCA, its cable and its leaf port"]
    assert "Couldn't set the link layer (on gpu-node-06)" in problems[3]


def test_no_perftest_in_the_image_fails_loudly():
    assert rails("rails-no-perftest.log") == [
        "rail check: ib_write_bw (perftest) is not in the image (on 8 nodes: gpu-node-00, "
        "gpu-node-01, gpu-node-02, gpu-node-03, gpu-node-04, gpu-node-05, gpu-node-06, "
        "gpu-node-07)",
        "ib_write_bw ran 0 of 64 rail pairs (8 nodes x 8 rails): the rail check did not run "
        "to completion"]


def test_a_missing_or_cut_rail_check_fails():
    assert nccl.check_rails((DATA / "good-8node.log").read_text(), NODES, RAILS, RAIL_FLOOR) \
        == ["no per-rail ib_write_bw check in the log (the launcher runs it before "
            "all_reduce_perf): the rails were not tested one by one"]
    text = (DATA / "rails-8node.log").read_text()
    cut = text[: text.index("# rail-check: rail 0 client gpu-node-05")]
    assert nccl.check_rails(cut, NODES, RAILS, RAIL_FLOOR) == [
        "ib_write_bw ran 16 of 64 rail pairs (8 nodes x 8 rails): the rail check did not run "
        "to completion"]
    begin = "# rail-check: rail 3 client gpu-node-03 mlx5_5 server gpu-node-04 mlx5_5\n"
    died = text[: text.index(begin) + len(begin)]  # the launcher died inside that run
    assert nccl.check_rails(died, NODES, RAILS, RAIL_FLOOR)[0] == (
        "rail 3 (mlx5_5): gpu-node-03 -> gpu-node-04: no ib_write_bw result (no exit status: "
        "no output)")
    assert nccl.check_rails("", 1, RAILS, RAIL_FLOOR) == []  # one node: no pair to test


# ---------------------------------------------------------------- what the launcher runs


def test_launcher_checks_the_rails_before_the_collective():
    c = prod_cluster()
    cmd = launcher_command(c)
    assert 0 < cmd.index("ib_write_bw") < cmd.index("all_reduce_perf")
    assert cmd.splitlines()[-1].startswith("mpirun ")  # its status is the launcher's
    assert f"rail_hcas='{' '.join(DGX_H100_HCAS)}'" in cmd  # rail order, template names
    # The run's workers are the Training Operator's hostfile: the gate sizes each run.
    assert "hostfile=${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}" in cmd
    assert 'mpirun --allow-run-as-root -np "$np" -npernode 8 ' in cmd
    for flag in ("-d \"$1\"", "--report_gbits", "-D \"$secs\"", "-q 4", "-s 65536"):
        assert flag in cmd
    assert "/opt/kube/kubectl" in cmd  # where the Training Operator puts it in the launcher
    script = acceptance.nccl_gate_script(c, c.workloads.nccl_test)
    plan = [x for x in script.splitlines() if x.startswith(("# 1.", "# 2."))]
    assert plan == [
        "# 1. ib_write_bw on each of 8 rails, node to next node in a ring: >= 360 Gb/s each "
        "(more than one node).",
        "# 2. all_reduce_perf with NCCL_ALGO=Ring: bus bandwidth floor 357.0 GB/s (358.9 GB/s "
        "on one node)."]


@pytest.mark.parametrize(("workers", "ranks"), [(1, 8), (2, 16), (9, 72)])
def test_a_run_takes_its_size_from_the_hostfile(tmp_path, workers, ranks):
    """The launcher's rail check and rank count follow the run's hostfile (one line per worker,
    as the Training Operator writes it): one node has no rail to check."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"nccl-allreduce-run-worker-{i} slots=8\n"
                                for i in range(workers)))
    rails = acceptance.rail_check_script(prod_cluster())
    proc = subprocess.run(["bash", "-c", rails + 'echo "ranks $np"'], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "KUBECTL": "false",
                                          "OMPI_MCA_orte_default_hostfile": str(hostfile)},
                          timeout=120)
    assert proc.stdout.splitlines()[-1] == f"ranks {ranks}"
    started = [x for x in proc.stdout.splitlines() if x.startswith("# rail-check: start")]
    assert started == ([] if workers == 1 else [
        f"# rail-check: start: ib_write_bw on 8 rails x {workers} nodes in a ring, 10 s per "
        "pair, floor 360 Gb/s"])


def test_a_node_with_other_hca_names_gets_its_own(tmp_path):
    def edit(rows: list[dict[str, str]]) -> None:
        for row in rows:
            if row["hostname"] == "gpu-node-05" and row["rail"] == "2":
                row["hca"] = "mlx5_2"
    script = acceptance.rail_check_script(prod_with_rows(tmp_path, edit))
    own = DGX_H100_HCAS[:2] + ["mlx5_2"] + DGX_H100_HCAS[3:]
    assert f"    gpu-node-05) echo '{' '.join(own)}' ;;" in script
    assert script.count(") echo '") == 1


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed")
def test_launcher_and_worker_scripts_pass_shellcheck(tmp_path):
    launcher = tmp_path / "launcher.sh"
    launcher.write_text("#!/usr/bin/env bash\n" + launcher_command(prod_cluster()))
    worker = tmp_path / "worker.sh"
    worker.write_text("#!/bin/sh\n" + acceptance.rail_worker_script())
    for path, shell in ((launcher, "bash"), (worker, "sh")):
        proc = subprocess.run([SHELLCHECK or "shellcheck", "-S", "warning", "-s", shell,
                               str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def run_rail_check(tmp_path: Path, perftest: bool = True, **fake: str) -> str:
    """The rendered rail check, run by bash against tests/data/nccl/bin's kubectl and
    ib_write_bw stand-ins (8 workers, 8 rails, all on this machine)."""
    c = prod_cluster()
    script = acceptance.rail_check_script(c)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    hostfile = tmp_path / "hostfile"  # as the Training Operator writes it for 8 workers
    hostfile.write_text("".join(f"nccl-allreduce-worker-{i} slots=8\n" for i in range(NODES)))
    shutil.copy(DATA / "bin" / "kubectl", bindir / "kubectl")
    if perftest:
        shutil.copy(DATA / "bin" / "ib_write_bw", bindir / "ib_write_bw")
    env = {"PATH": os.pathsep.join([str(bindir), str(Path(sys.executable).parent), "/usr/bin",
                                    "/bin"]),
           "KUBECTL": str(bindir / "kubectl"), "RAIL_CHECK_SETTLE_S": "0",
           "OMPI_MCA_orte_default_hostfile": str(hostfile),
           **{f"FAKE_{k.upper()}": v for k, v in fake.items()}}
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout


SCENARIOS = {  # recorded log -> how the stand-ins were set up
    "rails-8node.log": {},
    "rails-slow-rail.log": {"ib_write_bw_slow": "10.244.2.17:mlx5_4"},  # gpu-node-04
    "rails-port-down.log": {"ib_write_bw_down": "10.244.4.17:mlx5_10"},  # gpu-node-06
    "rails-no-perftest.log": {"perftest": ""},
}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ib_write_bw", path="/usr/bin:/bin") is not None,
                    reason="a real perftest on this machine would stand in for the fake")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_rendered_rail_check_prints_the_recorded_logs(tmp_path, name):
    """The rail logs are what the launcher's script prints (regenerate: python
    tests/test_nccl.py); the checker's verdicts above are on this exact text."""
    fake = dict(SCENARIOS[name])
    perftest = fake.pop("perftest", "yes") != ""
    assert run_rail_check(tmp_path, perftest, **fake) == (DATA / name).read_text()


@pytest.mark.slow
def test_a_pod_that_cannot_be_read_is_reported(tmp_path):
    out = run_rail_check(tmp_path, kubectl_down="nccl-allreduce-worker-5")
    problems = nccl.check_rails(out, NODES, RAILS, RAIL_FLOOR)
    assert problems[0].startswith("rail check: kubectl get pod failed: Error from server "
                                  "(NotFound)")
    assert problems[1] == "rail check: no pod IP for the next worker (nccl-allreduce-worker-5) " \
                          "(on gpu-node-07)"
    assert problems[2].startswith("ib_write_bw ran 56 of 64 rail pairs")


# ---------------------------------------------------------------- the gate's checker


def test_checker_runs_as_a_plain_script(tmp_path):
    """The gate ships nccl.py to the control plane and runs it with python3 alone, on the
    launcher's log: the rail check, then all_reduce_perf."""
    src = Path(nccl.__file__)
    assert "import components" not in src.read_text()
    args = [sys.executable, "-I", str(src), "--ranks", "64", "--nodes", "8", "--min-busbw",
            "368", "--algo", "Ring", "--rails", "8", "--min-rail-gbps", "360"]

    def gate(*names: str) -> subprocess.CompletedProcess:
        log = tmp_path / "launcher.log"
        log.write_text("".join((DATA / n).read_text() for n in names))
        return subprocess.run([*args, str(log)], capture_output=True, text=True)

    ok = gate("rails-8node.log", "good-8node.log")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[0].startswith("rails: 64 of 64 ib_write_bw runs")
    assert ok.stdout.splitlines()[-1].startswith(
        "PASS: every rail >= 360 Gb/s (ib_write_bw), all-reduce (Ring) over 64 ranks")
    bad = gate("rails-slow-rail.log", "low-bandwidth.log")
    fails = [x for x in bad.stdout.splitlines() if x.startswith("FAIL: ")]
    assert bad.returncode == 1
    assert fails[0] == ("FAIL: rail 2 (mlx5_4): gpu-node-03 -> gpu-node-04: ib_write_bw "
                        "195.5 Gb/s, below the 360 Gb/s floor")  # the rails come first
    assert "below the fabric floor 368.0 GB/s" in fails[-1]
    socket = gate("rails-8node.log", "socket-fallback.log")
    assert socket.returncode == 1 and "FAIL: NCCL fell back to NET/Socket" in socket.stdout


if __name__ == "__main__":  # regenerate the rail logs from the rendered script
    import tempfile

    for log, setup in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as d:
            fake = dict(setup)
            perftest = fake.pop("perftest", "yes") != ""
            (DATA / log).write_text(run_rail_check(Path(d), perftest, **fake))
            print(f"wrote {DATA / log}")
