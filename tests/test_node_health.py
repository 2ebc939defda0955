"""Node health detection (docs/health.md): the monitors implement the documented table, each
node's rails file agrees with the switch port descriptions the fabric layer writes, the
thresholds default to their vendors' figures and are validated, each check finds its fault on a
fixture DGX H100 node and names it, and (slow) the real node-problem-detector, built from its
release archive, reports every fault class injected into such a node as the documented
condition and reason, and none on a healthy node."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.node_health import detector, npd_binary
from support.project import REPO, prod_raw
from support.sandbox import prod_cluster

from components.model.fields import ConfigError
from components.planning import health, port_descriptions
from components.wiring.loading import validate_cluster
from twin.node_health import FixtureNode, kernel_line

NODE = "gpu-node-03"


@dataclass(frozen=True)
class Row:
    fault: str
    monitor: str
    condition: str | None  # None: an event
    reason: str


@functools.cache
def documented() -> tuple[Row, ...]:
    """The table of docs/health.md, "What is detected"."""
    text = (REPO / "docs/health.md").read_text()
    table = text[text.index("## What is detected"):text.index("### Thresholds")]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[2].startswith("`"):
            continue
        rows.append(Row(cells[0], cells[2].strip("`"),
                        None if cells[3] == "event" else cells[3].strip("`"),
                        cells[4].strip("`")))
    return tuple(rows)


def row(fault: str) -> Row:
    return next(r for r in documented() if r.fault == fault)


@pytest.fixture(scope="module")
def cluster() -> Any:
    return prod_cluster()


def write_files(cluster: Any, out: Path, source: health.LogFile | None = None,
                interval_s: int | None = None) -> Path:
    """Everything node-problem-detector is given, with the checks and rails under `out`, and
    the kernel log from `source` (kmsg without one)."""
    layout = health.Layout(plugins=str(out / "plugins"), rails=str(out / "rails"))
    for name, text in health.files(cluster, layout, source or health.Kmsg(), interval_s).items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
        if name.startswith("plugins/"):
            (out / name).chmod(0o755)  # node-problem-detector runs them as programs
    return out


def monitors(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "monitors").glob("*.json"))}


# ---------------------------------------------------------------- the model


def test_the_health_section_may_be_left_out_and_follows_the_vendors() -> None:
    h = prod_cluster().health  # Pulumi.prod.yaml has no `health` key
    assert h.infiniband.symbol_error_ber == 1e-12  # the IBTA's BER limit, ibdiagnet's default
    assert h.infiniband.link_downed_per_check == 0
    assert h.nvlink.links_per_gpu == 18  # H100 SXM5
    assert h.check_interval_seconds == 30  # NPD's example invoke_interval
    assert h.dcgm_host_engine == "localhost:5555"  # DCGM's port


def test_thresholds_are_checked_with_their_key_paths() -> None:
    raw = prod_raw()
    raw["health"] = {"checkIntervalSeconds": 2, "nvlink": {"linksPerGpu": 19},
                     "infiniband": {"symbolErrorBer": 0}, "dcgmHostEngine": "no port"}
    with pytest.raises(ConfigError) as err:
        validate_cluster(raw, REPO)
    paths = sorted(p.path for p in err.value.problems)
    assert paths == ["health.checkIntervalSeconds", "health.dcgmHostEngine",
                     "health.infiniband.symbolErrorBer", "health.nvlink.linksPerGpu"]


def test_thresholds_reach_the_checks(tmp_path: Path) -> None:
    raw = prod_raw()
    raw["health"] = {"checkIntervalSeconds": 60, "nvlink": {"linksPerGpu": 12},
                     "infiniband": {"symbolErrorBer": 1e-10, "linkDownedPerCheck": 2}}
    out = write_files(validate_cluster(raw, REPO), tmp_path)
    ib, fabric = monitors(out)["infiniband-rail-monitor"], monitors(out)["nvidia-fabric-monitor"]
    assert ib["pluginConfig"]["invoke_interval"] == "60s"
    errors = next(r for r in ib["rules"] if r["condition"] == "InfinibandRailErrors")
    assert errors["args"][2:] == ["400", "1e-10", "2"]
    nvlink = next(r for r in fabric["rules"] if r["condition"] == "NVLinkDown")
    assert nvlink["args"] == ["12"]


# ---------------------------------------------------------------- the monitors


def test_the_monitors_detect_exactly_the_documented_table(cluster: Any, tmp_path: Path) -> None:
    found = set()
    for source, config in monitors(write_files(cluster, tmp_path)).items():
        assert config["source"] == source and config["metricsReporting"] is True
        for rule in config["rules"]:
            found.add((source, rule.get("condition"), rule["reason"]))
        defaults = {c["type"] for c in config["conditions"]}
        assert defaults == {r.get("condition") for r in config["rules"]} - {None}
    assert found == {(r.monitor, r.condition, r.reason) for r in documented()}
    assert len(documented()) == 17


def test_each_check_sets_its_own_condition(cluster: Any, tmp_path: Path) -> None:
    """A custom monitor sets a condition from each rule's result in turn: two rules on one
    condition would clear each other."""
    for source, config in monitors(write_files(cluster, tmp_path)).items():
        if config["plugin"] == "custom":
            conditions = [r["condition"] for r in config["rules"]]
            assert len(conditions) == len(set(conditions)), source


XID_LINES = {  # as the NVIDIA driver logs them (NVIDIA's Xid docs and bug reports)
    "NVRM: Xid (PCI:0000:2b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
    "bus.": "GPUFellOffBus",
    "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.": "GPUFellOffBus",
    "NVRM: Xid (PCI:0000:18:00): 48, pid=2114, name=python3, An uncorrectable double bit error "
    "(DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.":
        "DoubleBitECCError",
    "NVRM: Xid (PCI:0000:65:00): 64, pid='N/A', Row Remapper: Failed to remap row":
        "RowRemapFailure",
    "NVRM: Xid (PCI:0000:65:00): 63, pid=1862, Row Remapper: New row marked for remapping, "
    "reset gpu to activate.": "RowRemapPending",
    "NVRM: Xid (PCI:0000:9a:00): 94, pid=1345, name=python, Contained: SM (0x1). RST: No, "
    "D-RST: No": "ContainedECCError",
    "NVRM: Xid (PCI:0000:9a:00): 95, pid='<unknown>', name=<unknown>, Uncontained: FBHUB. "
    "RST: Yes, D-RST: No": "UncontainedECCError",
    "NVRM: Xid (PCI:0000:5d:00): 119, pid=3040, name=nvidia-smi, Timeout after 6s of waiting "
    "for RPC response from GPU0 GSP!": "GSPRPCTimeout",
    "NVRM: Xid (PCI:0000:ba:00): 74, pid=1, NVLink: fatal error detected on link 7": "NVLinkError",
    "INFO: task python3:4021 blocked for more than 122 seconds.": "TaskHung",
    # Application faults and what merely resembles a class: no rule.
    "NVRM: Xid (PCI:0000:18:00): 13, pid=2114, name=python3, Graphics Exception": None,
    "NVRM: Xid (PCI:0000:18:00): 31, pid=2114, name=python3, Ch 00000008, MMU Fault": None,
    "NVRM: Xid (PCI:0000:18:00): 480, hypothetical future code": None,
}


@pytest.mark.parametrize("line", sorted(XID_LINES))
def test_kernel_rules_classify_the_drivers_lines(line: str) -> None:
    """NPD matches a rule's pattern to the end of the line (pkg/systemlogmonitor/log_buffer.go);
    RE2 and Python agree on these patterns."""
    rules = health.kernel_monitor()["rules"]
    matched = [r["reason"] for r in rules if re.search(r["pattern"] + r"\Z", line)]
    assert matched == ([XID_LINES[line]] if XID_LINES[line] else [])


def test_the_kernel_rules_are_the_same_over_kmsg_and_a_file() -> None:
    kmsg, file = health.kernel_monitor(), health.kernel_monitor(health.LogFile("/tmp/k.log"))
    assert kmsg["plugin"] == "kmsg" and kmsg["logPath"] == "/dev/kmsg"
    assert kmsg["rules"] == file["rules"] and kmsg["conditions"] == file["conditions"]


def test_each_nodes_rails_file_matches_the_switch_port_descriptions(cluster: Any) -> None:
    """The committed prod rendering's switch commands say which port each rail's cable plugs
    into; the rails files NPD's checks name in their messages must say the same."""
    planned: dict[tuple[str, int], tuple[str, str, str]] = {}
    for path in (REPO / "rendered/prod/fabric/command-remote-Command").glob("*-config.yaml"):
        stdin = yaml.safe_load(path.read_text())["inputs"]["stdin"]
        switch = re.search(r"^hostname (\S+)$", stdin, re.M)
        assert switch, path
        for port, text in port_descriptions.port_descriptions(stdin).items():
            if (peer := port_descriptions.hca_peer(text)) is not None:
                host, rail, hca = peer
                planned[(host, rail)] = (hca, switch.group(1), str(port))
    files = health.rails_files(cluster)
    assert sorted(files) == sorted(n.hostname for n in cluster.nodes)
    seen = {}
    for host, text in files.items():
        for line in text.splitlines():
            rail, hca, leaf, port, cable, node_port = line.split("\t")
            seen[(host, int(rail))] = (hca, leaf, port)
            assert cable == f"{leaf}:{port}"
            assert re.fullmatch(r"OSFP[1-4]P[12]", node_port), line
    assert seen == planned
    assert seen[(NODE, 3)] == ("mlx5_5", "leaf-su1-r2-3", "20")


# ---------------------------------------------------------------- the checks on a fixture node


@pytest.fixture
def node(cluster: Any, tmp_path: Path) -> tuple[FixtureNode, Path]:
    out = write_files(cluster, tmp_path / "config")
    hcas = [line.split("\t")[1] for line in (out / "rails" / NODE).read_text().splitlines()]
    return FixtureNode(tmp_path / "node", hcas), out


def run_check(node: tuple[FixtureNode, Path], condition: str) -> tuple[int, str]:
    """The rule that sets `condition`, run as node-problem-detector runs it: (status, message)."""
    fixture, out = node
    rule = next(r for m in monitors(out).values() for r in m["rules"]
                if r.get("condition") == condition and "path" in r)
    proc = subprocess.run(["bash", rule["path"], *rule["args"]], capture_output=True, text=True,
                          env=fixture.env(NODE, os.environ["PATH"]), timeout=30)
    return proc.returncode, proc.stdout.strip()


CHECKED = ("InfinibandRailDown", "InfinibandRailDegraded", "InfinibandRailErrors", "NVLinkDown",
           "NVSwitchFabricNotReady", "GPUHealthFailure", "RAIDDegraded")


@pytest.mark.parametrize("condition", CHECKED)
def test_a_healthy_node_passes_every_check(node: tuple[FixtureNode, Path], condition: str) -> None:
    assert run_check(node, condition)[0] == 0
    assert run_check(node, condition)[0] == 0  # and again, with the counters' baseline


def test_a_rail_down_is_named_by_its_switch_port_and_cable(node: tuple[FixtureNode, Path]) -> None:
    node[0].rail_down("mlx5_5")
    assert run_check(node, "InfinibandRailDown") == (1, (
        "rail 3 mlx5_5: port DOWN, Disabled (leaf-su1-r2-3 port 20, cable leaf-su1-r2-3:20, "
        "node port OSFP4P1)"))
    assert run_check(node, "InfinibandRailDegraded")[0] == 0  # a down port has no rate to judge


def test_a_missing_hca_is_a_rail_down(node: tuple[FixtureNode, Path]) -> None:
    shutil.rmtree(node[0].root / "sys/class/infiniband/mlx5_0")
    status, message = run_check(node, "InfinibandRailDown")
    assert status == 1 and message.startswith("rail 0 mlx5_0: no such port (leaf-su1-r0-1 port 4")


@pytest.mark.parametrize("rate", ["100 Gb/sec (1X NDR)", "200 Gb/sec (4X HDR)"])
def test_a_rail_below_its_planned_rate(node: tuple[FixtureNode, Path], rate: str) -> None:
    node[0].rail_rate("mlx5_9", rate)
    assert run_check(node, "InfinibandRailDegraded") == (1, (
        f"rail 5 mlx5_9: {rate}, planned 400 Gb/sec (leaf-su1-r4-5 port 20, "
        "cable leaf-su1-r4-5:20, node port OSFP2P2)"))


def test_symbol_errors_count_against_the_bit_error_rate(node: tuple[FixtureNode, Path]) -> None:
    fixture = node[0]
    assert run_check(node, "InfinibandRailErrors") == (
        0, "no rail's error counters rose past their limits")  # the baseline
    # 10^-12 of 400 Gb/s is 0.4 errors a second (at least one second is counted between
    # runs): a thousand in a few seconds are far past it.
    fixture.add_errors("mlx5_0", "symbol_error", 1000)
    status, message = run_check(node, "InfinibandRailErrors")
    assert status == 1
    assert re.fullmatch(r"rail 0 mlx5_0: symbol_error rose by 1000 in \d+s \(at most \d+ at BER "
                        r"1e-12\) \(leaf-su1-r0-1 port 4, cable leaf-su1-r0-1:4, node port "
                        r"OSFP4P2\)", message), message
    assert run_check(node, "InfinibandRailErrors")[0] == 0  # no new errors since


def test_symbol_errors_within_the_configured_rate_pass(tmp_path: Path) -> None:
    raw = prod_raw()
    raw["health"] = {"infiniband": {"symbolErrorBer": 1e-9}}  # 400 errors a second at 400G
    out = write_files(validate_cluster(raw, REPO), tmp_path / "config")
    hcas = [line.split("\t")[1] for line in (out / "rails" / NODE).read_text().splitlines()]
    node = (FixtureNode(tmp_path / "node", hcas), out)
    run_check(node, "InfinibandRailErrors")
    node[0].add_errors("mlx5_3", "symbol_error", 100)
    assert run_check(node, "InfinibandRailErrors")[0] == 0
    node[0].add_errors("mlx5_3", "symbol_error", 100_000)
    status, message = run_check(node, "InfinibandRailErrors")
    assert status == 1 and message.startswith("rail 1 mlx5_3: symbol_error rose by 100000 in ")


@pytest.mark.parametrize("counter", ["link_downed", "local_link_integrity_errors",
                                     "excessive_buffer_overrun_errors"])
def test_any_link_down_or_integrity_error_is_reported(node: tuple[FixtureNode, Path],
                                                       counter: str) -> None:
    run_check(node, "InfinibandRailErrors")
    node[0].add_errors("mlx5_11", counter, 1)
    status, message = run_check(node, "InfinibandRailErrors")
    assert (status, message.split(" (")[0]) == (1, f"rail 7 mlx5_11: {counter} rose by 1")


def test_a_cleared_counter_is_a_new_baseline(node: tuple[FixtureNode, Path]) -> None:
    fixture = node[0]
    fixture.add_errors("mlx5_4", "link_downed", 3)
    run_check(node, "InfinibandRailErrors")
    (fixture.root / "sys/class/infiniband/mlx5_4/ports/1/counters/link_downed").write_text("0\n")
    assert run_check(node, "InfinibandRailErrors")[0] == 0


def test_an_inactive_nvlink(node: tuple[FixtureNode, Path]) -> None:
    node[0].nvlinks_inactive(2, {7, 11})
    assert run_check(node, "NVLinkDown") == (1, "GPU 2: 16 of 18 NVLinks active (inactive: 7, 11)")


def test_the_fabric_manager_and_the_gpus_registration(node: tuple[FixtureNode, Path]) -> None:
    fixture = node[0]
    fixture.fabric_manager("failed")
    assert run_check(node, "NVSwitchFabricNotReady") == (
        1, "nvidia-fabricmanager is failed, not active")
    fixture.fabric_manager("active")
    fixture.gpu_fabric(3, "In Progress", "N/A")
    assert run_check(node, "NVSwitchFabricNotReady") == (
        1, "GPU 00000000:5D:00.0 fabric state In Progress")


def test_dcgm_failure_warning_and_no_host_engine(node: tuple[FixtureNode, Path]) -> None:
    fixture = node[0]
    assert run_check(node, "GPUHealthFailure") == (0, "DCGM health: Healthy")
    assert (fixture.tools / "dcgm-watches").read_text() == "On\n"  # the check set the watches
    fixture.dcgm("Failure", [("GPU", ""), ("-> 3", "Failure"), ("      -> Memory system",
                                                               "Failure")])
    assert run_check(node, "GPUHealthFailure") == (
        1, "DCGM health: Failure: GPU 3 Memory system Failure")
    fixture.dcgm("Warning", [("-> 1", "Warning"), ("      -> PCIe system", "Warning")])
    assert run_check(node, "GPUHealthFailure") == (
        0, "DCGM health: Warning: GPU 1 PCIe system Warning")
    fixture.dcgm_unreachable()
    status, message = run_check(node, "GPUHealthFailure")
    assert status == 2 and message.startswith("DCGM host engine at localhost:5555:")


def test_a_broken_scratch_array_and_a_degraded_boot_mirror(node: tuple[FixtureNode, Path]) -> None:
    fixture = node[0]
    fixture.scratch_broken()
    assert run_check(node, "RAIDDegraded") == (1, "md127 (raid0) is broken: a member is gone")
    fixture.heal()
    fixture.boot_mirror_degraded()
    assert run_check(node, "RAIDDegraded") == (
        1, "md0 (raid1) has a failed member; md0 is degraded [U_]")


def test_a_missing_scratch_array(node: tuple[FixtureNode, Path]) -> None:
    mdstat = node[0].root / "proc/mdstat"
    mdstat.write_text(re.sub(r"(?ms)^md127 :.*?\n\n", "", mdstat.read_text()))
    assert run_check(node, "RAIDDegraded") == (
        1, "no RAID0 of 8 drives (the NVMe scratch array) is assembled")


def test_a_check_that_cannot_tell_says_unknown(node: tuple[FixtureNode, Path]) -> None:
    (node[0].bin / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    status, message = run_check(node, "NVLinkDown")
    assert (status, message) == (2, "nvidia-smi nvlink --status failed: NVIDIA-SMI has failed")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_checks_pass_shellcheck_as_they_run(tmp_path: Path) -> None:
    """The files under scripts/health/ are checked as they are (test_script_files.py); these
    are the checks with their shared part included."""
    for name, text in health.plugins().items():
        (tmp_path / f"{name}.sh").write_text(text)
    run = subprocess.run(["shellcheck", "-S", "style", *sorted(map(str, tmp_path.iterdir()))],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


# ---------------------------------------------------------------- the real node-problem-detector


@pytest.fixture(scope="module")
def npd() -> Path:
    return npd_binary()


KERNEL_FAULTS = {  # fault class of docs/health.md -> the kernel message that reports it
    "GPU fallen off the bus": "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, "
                              "GPU has fallen off the bus.",
    "double-bit ECC error": "NVRM: Xid (PCI:0000:18:00): 48, pid=2114, name=python3, An "
                            "uncorrectable double bit error (DBE) has been detected on GPU.",
    "row remap failure": "NVRM: Xid (PCI:0000:18:00): 64, pid='N/A', Row Remapper: Failed to "
                         "remap row",
    "uncontained ECC error": "NVRM: Xid (PCI:0000:9a:00): 95, pid=1, name=python3, Uncontained: "
                             "FBHUB. RST: Yes, D-RST: No",
    "GSP RPC timeout": "NVRM: Xid (PCI:0000:5d:00): 119, pid=3040, name=nvidia-smi, Timeout "
                       "after 6s of waiting for RPC response from GPU3 GSP!",
    "GSP error": "NVRM: Xid (PCI:0000:5d:00): 120, pid=3040, name=nvidia-smi, GSP task "
                 "timeout @ pc:0x5a6b, task: 1",
    "row remap pending": "NVRM: Xid (PCI:0000:65:00): 63, pid=1862, Row Remapper: New row "
                         "marked for remapping, reset gpu to activate.",
    "contained ECC error": "NVRM: Xid (PCI:0000:9a:00): 94, pid=1345, name=python, Contained: "
                           "SM (0x1). RST: No, D-RST: No",
    "NVLink error": "NVRM: Xid (PCI:0000:ba:00): 74, pid=1, NVLink: fatal error detected on "
                    "link 7",
    "hung task": "INFO: task python3:4021 blocked for more than 122 seconds.",
}


def inject(fixture: FixtureNode, fault: str) -> None:
    """The fault classes of docs/health.md a check finds, done to the fixture node."""
    {
        "rail down": lambda: fixture.rail_down("mlx5_5"),
        "rail below its planned rate": lambda: fixture.rail_rate("mlx5_9", "100 Gb/sec (1X NDR)"),
        "rail error counters rising": lambda: fixture.add_errors("mlx5_0", "symbol_error", 5000),
        "NVLink down": lambda: fixture.nvlinks_inactive(2, {7}),
        "fabric manager not ready": lambda: fixture.fabric_manager("failed"),
        "DCGM health failure": lambda: fixture.dcgm("Failure", [
            ("-> 3", "Failure"), ("      -> Memory system", "Failure")]),
        "md array degraded": lambda: fixture.scratch_broken(),
    }[fault]()


def _raised(seen: dict[tuple[str, ...], float]) -> set[tuple[str, ...]]:
    return {key for key, value in seen.items() if value > 0}


@pytest.mark.slow
def test_node_problem_detector_reports_each_injected_fault(
        npd: Path, node: tuple[FixtureNode, Path], tmp_path: Path, cluster: Any) -> None:
    fixture, _ = node
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    out = write_files(cluster, tmp_path / "npd", health.LogFile(str(kernel_log)), interval_s=1)
    custom = [out / "monitors" / f"{m}.json" for m in monitors(out) if m != health.KERNEL_SOURCE]
    env = fixture.env(NODE, os.environ["PATH"])
    log = tmp_path / "npd.log"
    with detector(npd, [out / "monitors" / f"{health.KERNEL_SOURCE}.json"], custom, NODE, env,
                  log) as d:
        # Healthy: every check has run (the counters' baseline taken), nothing is raised.
        d.wait_for(lambda seen: "initial status" in d.log_text(), timeout=30)
        seen = d.wait_for(lambda seen: False, timeout=4)
        assert _raised(seen) == set(), d.log_text()
        reasons = {key[1] for key in seen if key[0] == "problem_counter"}
        assert reasons == {r.reason for r in documented()}

        # Every fault class at once: each ends in its documented condition and reason.
        with kernel_log.open("a") as f:
            for r in documented():
                if r.fault in KERNEL_FAULTS:
                    f.write(kernel_line(KERNEL_FAULTS[r.fault]))
        for r in documented():
            if r.fault not in KERNEL_FAULTS:
                inject(fixture, r.fault)
        # A condition holds one reason at a time: of the Xids that need a GPU reset, the last
        # one logged (the table's order).
        holds = {r.condition: r.reason for r in documented() if r.condition}
        want = ({("problem_counter", r.reason) for r in documented()}
                | {("problem_gauge", reason, condition) for condition, reason in holds.items()})
        # Symbol errors keep rising while the detector looks, as on a failing cable.
        rising = functools.partial(fixture.add_errors, "mlx5_0", "symbol_error", 5000)
        seen = d.wait_for(lambda seen: want <= _raised(seen), timeout=60, tick=rising)
        assert want - _raised(seen) == set(), d.log_text()[-4000:]
        assert {k for k in _raised(seen) if k[0] == "problem_gauge"} == {
            ("problem_gauge", reason, condition) for condition, reason in holds.items()}
        text = d.log_text()
        assert ("rail 3 mlx5_5: port DOWN, Disabled (leaf-su1-r2-3 port 20, cable "
                "leaf-su1-r2-3:20, node port OSFP4P1)") in text
        assert "rail 5 mlx5_9: 100 Gb/sec (1X NDR), planned 400 Gb/sec" in text

        # Repaired: the checks' conditions clear; the kernel's hold until a reset or restart.
        fixture.heal()
        kernel = {("problem_gauge", holds[c], c) for c in health.KERNEL_CONDITIONS}
        seen = d.wait_for(lambda seen: {k for k in _raised(seen) if k[0] == "problem_gauge"}
                          == kernel, timeout=30)
        assert {k for k in _raised(seen) if k[0] == "problem_gauge"} == kernel
