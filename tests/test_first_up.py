"""What the first real `pulumi preview` / `pulumi up` of the prod stack would hit, each through
the real program and `Pulumi.prod.yaml` (the offline preview runs `__main__.py` under Pulumi's
own mock runtime): config and planning errors, credentials over SSH, the bring-up order, the
stack file, the Kubernetes provider, split stacks, host moves and harmful config changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.project import REPO, copy_repo, run_offline

KEY = "gpu-cluster:cluster"
Change = Callable[[dict[str, Any]], None]


def put(path: str, value: Any) -> Change:
    """Set one dotted key path of the cluster object (list items by index)."""
    def change(cluster: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = cluster
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[int(last) if isinstance(node, list) else last] = value
    return change


def write_stack(project: Path, stack: str, *changes: Change) -> None:
    doc = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    for change in changes:
        change(doc["config"][KEY])
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def plan_of(project: Path, stack: str = "prod") -> list[dict[str, Any]]:
    return json.loads((project / "build" / stack / "plan.json").read_text())["resources"]


@pytest.fixture(scope="module")
def prod_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unchanged prod stack previewed (exit 0: no mandatory violation)."""
    project = copy_repo(tmp_path_factory.mktemp("prod"))
    proc = run_offline(project, "preview", "--stack", "prod")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project


@pytest.fixture(scope="module")
def prod(prod_project: Path) -> list[dict[str, Any]]:
    return plan_of(prod_project)


@pytest.fixture(scope="module")
def shared_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


# ---------------------------------------------------------------- 1. errors exit 2, no traceback

# Single harmful changes a reviewer would try, with the key path the message must name. The
# first group is refused by the fabric planner, the rest by the config model and its checks.
REFUSED = {
    "rails-per-leaf": (put("fabric.railsPerLeaf", 8), "fabric.railsPerLeaf"),
    "spines": (put("fabric.spines", 3), "fabric.spines"),
    "gpu-count": (put("gpuNodes.template.gpu.count", 4), "gpuNodes.template.hcas"),
    "slot-overflow": (put("gpuNodes.ranges.0.firstSlot", 30), "gpuNodes.ranges[0]"),
    "pkey-default": (put("fabric.partitions.0.pkey", 0x7FFF), "fabric.partitions[0].pkey"),
    "sm-priorities": (put("fabric.subnetManagers.1.priority", 15),
                      "fabric.subnetManagers[1].priority"),
    "no-control-plane": (put("hosts.0.role", "sm-host"), "hosts"),
    "version": (put("kubernetes.version", "1.99.0"), "kubernetes.version"),
    "service-overlap": (put("kubernetes.serviceCidr", "10.244.0.0/16"), "kubernetes.serviceCidr"),
    "job-too-big": (put("workloads.training.0.nodes", 16), "workloads.training[0].nodes"),
    "rdma-pair": (put("platform.networkOperator.version", "26.4.0"),
                  "platform.networkOperator.version"),
    "unknown-key": (put("fabric.tiers", 2), "fabric.tiers"),
    "inventory": (put("inventoryFile", "inventory/missing.csv"), "inventoryFile"),
    # item 9: harmful changes that used to pass review with exit 0
    "pod-cidr": (put("kubernetes.podCidr", "10.244.0.0/21"), "kubernetes.podCidr"),
    "no-gpudirect": (put("platform.gpuOperator.gpudirectRdma", False),
                     "platform.gpuOperator.gpudirectRdma"),
    "ckpt-read-only": (put("storage.lustre.1.mountOptions", ["flock", "ro"]),
                       "storage.lustre[1].mountOptions"),
    "ckpt-in-dataset": (put("workloads.training.0.checkpointPath", "/data/ckpt"),
                        "workloads.training[0].checkpointPath"),
    "ckpt-relative": (put("workloads.training.0.checkpointPath", "checkpoints/llama"),
                      "workloads.training[0].checkpointPath"),
    "nccl-floor": (put("workloads.ncclTest.minEfficiency", 0.3),
                   "workloads.ncclTest.minEfficiency"),
}

# Near misses of the item-9 refusals: each looks like one of them and is fine.
ACCEPTED = {
    "pod-cidr-just-fits": put("kubernetes.podCidr", "10.244.0.0/20"),   # 16 x /24 for 9 nodes
    "gpudirect-off-without-gate": lambda c: (put("platform.gpuOperator.gpudirectRdma", False)(c),
                                             put("workloads.ncclTest.gate", False)(c)),
    "dataset-read-only": put("storage.lustre.0.mountOptions", ["flock", "ro"]),
    "ckpt-own-mount": put("workloads.training.0.checkpointPath", "/ckpt/llama-70b"),
    "nccl-floor-at-the-line": put("workloads.ncclTest.minEfficiency", 0.5),
}


# 19 previews in a fresh interpreter each (~0.7 s apiece); the config model's own tests
# (test_config.py) cover the same refusals in-process.
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_config_or_planning_error_exits_2_naming_path_value_and_fix(
        shared_project: Path, case: str) -> None:
    change, path = REFUSED[case]
    write_stack(shared_project, case, change)
    proc = run_offline(shared_project, "preview", "--stack", case)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "nothing was registered" in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if f"{KEY}.{path}" in ln)
    assert "(got " in line, line
    following = proc.stderr.split(line, 1)[1].lstrip().splitlines()[0]
    assert following.startswith("Fix: ") and len(following) > len("Fix: ") + 3, following
    assert not (shared_project / "build" / case).exists()  # nothing written either


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_a_near_miss_still_previews_clean(shared_project: Path, case: str) -> None:
    write_stack(shared_project, case, ACCEPTED[case])
    proc = run_offline(shared_project, "preview", "--stack", case, "--policy-config",
                       str(shared_project / "policies/policy-config.prod.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_program_refuses_with_pulumi_run_error_so_the_cli_prints_no_traceback() -> None:
    """The CLI's Python host prints a RunError's message alone (no stack trace, no program
    source); any other exception comes with both."""
    src = (REPO / "__main__.py").read_text()
    assert "except ConfigError" in src and "raise pulumi.RunError(str(err)) from None" in src
    import pulumi

    from offline.preview import is_config_error
    assert is_config_error(pulumi.RunError("x"))
    assert not is_config_error(ValueError("x"))


# ---------------------------------------------------------------- 2. credentials over SSH


def test_no_remote_command_passes_anything_through_the_ssh_environment(prod) -> None:
    """pulumi-command sends `environment` with SSH Setenv, which a stock sshd refuses (no
    AcceptEnv): the command then fails. Its previous output is re-sent the same way."""
    remote = [r for r in prod if r["type"].startswith("command:remote:")]
    assert len(remote) > 20
    for r in remote:
        assert "environment" not in r["inputs"], r["name"]
        assert r["inputs"].get("addPreviousOutputInEnv") is False, r["name"]


def test_joins_take_their_credentials_on_stdin_and_the_script_as_the_command(
        prod_project: Path, prod) -> None:
    joins = {r["name"]: r for r in prod if r["name"].endswith("-kubeadm-join")
             and r["name"].startswith("gpu-node-")}
    assert len(joins) == 8
    # The further control planes join once each (test_control_plane_ha): a fresh token never
    # re-runs an etcd member's join.
    planes = {r["name"]: r for r in prod if r["name"] in ("mgmt-02-kubeadm-join",
                                                          "mgmt-03-kubeadm-join")}
    assert [r["options"]["ignoreChanges"] for r in planes.values()] == [["stdin"]] * 2
    for name, r in joins.items():
        host = name.removesuffix("-kubeadm-join")
        script = prod_project / "build/prod/scripts" / host / "kubeadm-join.sh"
        create = r["inputs"]["create"]
        assert create.startswith("sudo bash -c ") and create.endswith(" kubeadm-join")
        assert "kubeadm join --config" in create and "IFS= read -r JOIN_TOKEN" in create
        assert script.read_text().strip() in create.replace("'\"'\"'", "'")
        assert r["inputs"]["stdin"] == "[secret]"      # the token and the CA hash
        assert "--preserve-env" not in create
        # A new token re-runs the guarded join: a no-op on a joined node, the join on a new
        # board. Only a new board (its SSH host key) mints a new token.
        assert r["options"]["ignoreChanges"] == []
        token = next(t for t in prod if t["name"] == f"{host}-join-token")
        node = next(n for n in prod if n["name"] == f"{host}-prepare")
        assert token["inputs"]["triggers"] == [node["inputs"]["connection"]["hostKey"]]


# ---------------------------------------------------------------- 3. bring-up order


def _waits_for(plan: list[dict[str, Any]]) -> dict[str, set[str]]:
    """urn -> every urn it waits for under the engine: its dependencies, what they wait for,
    and what its parent waits for (a child registers only after its parent's registration,
    which waits for the parent's dependencies; the SDK expands a component dependency to all
    of the component's children)."""
    by_urn = {r["urn"]: r for r in plan}
    memo: dict[str, set[str]] = {}

    def visit(urn: str) -> set[str]:
        if urn in memo:
            return memo[urn]
        memo[urn] = set()
        r = by_urn.get(urn)
        if r is None:
            return memo[urn]
        out: set[str] = set()
        deps = list((r.get("options") or {}).get("dependsOn") or [])
        provider = (r.get("options") or {}).get("provider")
        if provider:
            deps.append(provider)
        if r.get("parent"):
            deps.append(r["parent"])
        for d in deps:
            out.add(d)
            out |= visit(d)
        memo[urn] = out
        return out

    return {urn: visit(urn) for urn in by_urn}


def test_nothing_waits_for_a_ready_node_before_the_cni_is_installed(prod) -> None:
    """A kubeadm node is NotReady until a CNI runs on it. A command that waits for Ready and
    that the CNI's release (transitively) waits for deadlocks the first `pulumi up`."""
    waits = _waits_for(prod)
    cni = next(r["urn"] for r in prod if r["type"] == "kubernetes:helm.sh/v3:Release"
               and r["name"] == "calico")
    ready_waiters = [r["urn"] for r in prod if r["type"].startswith("command:")
                     and re.search(r"condition=Ready|Ready=True",
                                   str((r.get("inputs") or {}).get("create", "")))]
    for urn in ready_waiters:
        assert urn not in waits[cni], f"{urn} waits for Ready, and the CNI waits for it"
    # Membership still waits for the node to register, and the CNI for membership.
    members = [r for r in prod if r["name"].endswith("-member")]
    assert members and all("wait --for=create node/" in r["inputs"]["create"] for r in members)
    assert {m["urn"] for m in members} <= waits[cni]


def test_training_and_serving_wait_for_the_passed_acceptance_gate(prod) -> None:
    """The NCCL test takes every GPU node; created beside training and serving it would never
    get them (and would test a fabric already carrying traffic). Under the engine every
    training and serving object waits for the gate's command, which waits for the test."""
    waits = _waits_for(prod)
    gate = next(r for r in prod if r["name"] == "nccl-allreduce-acceptance")
    test = next(r["urn"] for r in prod if r["type"] == "kubernetes:kubeflow.org/v1:MPIJob")
    assert test in waits[gate["urn"]]
    later = [r for r in prod if r["type"].startswith("kubernetes:")
             and (r.get("inputs") or {}).get("metadata", {}).get("namespace") in
             ("training", "inference") and r["urn"] != test]
    kinds = {r["type"].rsplit(":", 1)[1] for r in later}
    assert {"PyTorchJob", "Deployment", "HorizontalPodAutoscaler",
            "PodDisruptionBudget"} <= kinds
    for r in later:
        if r["type"].rsplit(":", 1)[1] in ("PyTorchJob", "Deployment"):
            assert gate["urn"] in waits[r["urn"]], r["name"]
    assert gate["urn"] not in waits[test]


# ---------------------------------------------------------------- 4 + 5. CLI set-up


def test_the_policy_pack_virtualenv_is_created_wherever_the_pack_runs() -> None:
    """The CLI creates no virtualenv for a policy pack: `pulumi install` in policies/ (or pip
    into the venv PulumiPolicy.yaml names) must come before any `--policy-pack policies`."""
    venv = yaml.safe_load((REPO / "policies/PulumiPolicy.yaml").read_text())[
        "runtime"]["options"]["virtualenv"]
    readme = (REPO / "README.md").read_text()
    cli = readme[readme.index("## Using it with the Pulumi CLI"):]
    assert cli.index("(cd policies && pulumi install)") < cli.index("--policy-pack policies")
    for wf in (REPO / ".github/workflows").glob("*.yml"):
        for name, job in yaml.safe_load(wf.read_text())["jobs"].items():
            steps = job.get("steps", [])
            uses_pack = [i for i, s in enumerate(steps)
                         if (s.get("with") or {}).get("policyPacks") == "policies"]
            if not uses_pack:
                continue
            made = [i for i, s in enumerate(steps) if f"python -m venv policies/{venv} " in
                    str(s.get("run", "")) and "policies/requirements.txt" in s["run"]]
            assert made and made[0] < uses_pack[0], (wf.name, name)


def test_the_stack_file_holds_no_secure_value_and_the_project_declares_every_secret() -> None:
    """`secure: v1:placeholder:…` is no provider's ciphertext: the real CLI cannot read such a
    file. Secrets are declared in Pulumi.yaml (secret, no default), so the CLI refuses to run
    until `pulumi config set --secret` added each."""
    from components.wiring.loading import SECRET_KEYS
    stack = (REPO / "Pulumi.prod.yaml").read_text()
    assert "secure:" not in stack
    declared = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]
    assert set(declared) == set(SECRET_KEYS)
    for key in SECRET_KEYS:
        assert declared[key] == declared[key] | {"type": "string", "secret": True}
        assert "default" not in declared[key]
    # The workflows add them from the CI's secrets before any preview or update.
    for wf in (REPO / ".github/workflows").glob("*.yml"):
        text = wf.read_text()
        if "policyPacks" in text:
            assert "tools/set-stack-secrets.sh" in text, wf.name
    script = (REPO / "tools/set-stack-secrets.sh").read_text()
    assert all(f"set_secret {k} " in script for k in SECRET_KEYS)


def test_the_offline_preview_reads_the_committed_stack_file_with_placeholders(prod) -> None:
    """The key is a placeholder, named by the key `credentials.sshPublicKey` declares (its
    fingerprint, as `ssh-keygen -lf` prints it); the secret itself is not in the file."""
    prepare = next(r for r in prod if r["name"] == "gpu-node-00-prepare")
    assert prepare["inputs"]["connection"]["privateKey"] == \
        "[secret SHA256:gV+PPT0Y/DOzFlfeV78Gaim3Sp9LgxnXBQPaJssw/n0]"


# ---------------------------------------------------------------- 6. the Kubernetes provider


@pytest.mark.slow
def test_the_provider_is_pinned_to_the_cluster_and_never_drops_state(tmp_path: Path) -> None:
    """`PULUMI_K8S_DELETE_UNREACHABLE=true` in the runner's environment (the SDK reads it when
    the input is unset) must not reach the provider; `clusterIdentifier` keeps the provider
    (and every Kubernetes object with it) from being replaced when its kubeconfig is unknown
    at preview, e.g. after a rotated SSH key re-runs the command that reads it."""
    project = copy_repo(tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PULUMI_K8S_DELETE_UNREACHABLE": "true"}
    proc = subprocess.run([sys.executable, "-m", "offline", "preview", "--project-dir",
                           str(project), "--quiet"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    providers = [r for r in plan_of(project) if r["type"] == "pulumi:providers:kubernetes"]
    assert len(providers) == 1
    inputs = providers[0]["inputs"]
    assert inputs["deleteUnreachable"] == "false"  # provider config travels as strings
    assert inputs["clusterIdentifier"] == "h100-prod"
    assert inputs["kubeconfig"] == "[secret]"


# ---------------------------------------------------------------- 7. split stacks


@pytest.mark.slow
def test_a_split_stack_without_the_core_kubeconfig_fails_instead_of_using_the_runners(
        tmp_path: Path) -> None:
    """A missing stack output is None with get_output, and a provider without a kubeconfig
    reads $KUBECONFIG / ~/.kube/config: the platform would be applied to whatever cluster the
    runner points at. The part's check fails the preview instead."""
    project = copy_repo(tmp_path / "repo")
    core = "organization/gpu-cluster/site-core"
    write_stack(project, "site-core", put("split", {"part": "core", "parts": {
        "site-su1": {"part": "nodes", "sus": [1]}, "site-platform": {"part": "platform"}}}))
    doc = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    del doc["config"][KEY]
    doc["config"]["gpu-cluster:site"] = core
    (project / "Pulumi.site-platform.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    args = ["preview", "--stack", "site-platform", "--quiet"]
    proc = run_offline(project, *args)
    assert proc.returncode == 2, proc.stdout
    assert f"{core} has no outputs: it has not been applied yet" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    # A core applied without a kubeconfig (its command printed nothing) is refused too.
    assert run_offline(project, "preview", "--stack", "site-core", "--quiet").returncode == 0
    outputs = project / "build/site-core/outputs.json"
    recorded = json.loads(outputs.read_text())
    recorded["secretOutputNames"].remove("kubeconfig")
    recorded["outputs"]["kubeconfig"] = ""
    outputs.write_text(json.dumps(recorded))
    proc = run_offline(project, *args)
    assert proc.returncode == 2, proc.stdout
    assert f"{core} has no `kubeconfig` output: run `pulumi up` on that core stack first" \
        in proc.stderr
    # With the core's outputs as it exports them, the same stack previews.
    run_offline(project, "preview", "--stack", "site-core", "--quiet")
    proc = run_offline(project, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- 8. a host moves


@pytest.mark.slow
def test_a_changed_host_address_is_an_update_that_runs_create_on_the_new_host(
        tmp_path: Path) -> None:
    """pulumi-command 1.2 marks only `triggers` replace-on-change: a new connection.host is an
    update, `create` runs on the new host and `delete` never on the old one; the CLI shows the
    connection only as [secret]."""
    project = copy_repo(tmp_path / "repo")
    proc = run_offline(project, "preview", "--render", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    write_stack(project, "prod", put("gpuNodes.overrides", {
        "gpu-node-03": {"managementIp": "10.10.1.200"}}))
    proc = run_offline(project, "preview")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    diff = json.loads((project / "build/prod/diff.json").read_text())
    moved = {c["name"]: c for c in diff if "connection" in c["paths"]}
    assert {"gpu-node-03-prepare", "gpu-node-03-kubeadm-join"} <= set(moved)
    assert not [c for c in diff if c["action"] == "replace" and c["type"].startswith("command:")]
    for c in moved.values():
        assert c["action"] == "update"
        assert not [p for p in c["paths"] if p.startswith("connection.")]
        lines = c["textDiffs"]["connection"]
        assert "[secret]" in lines[0]
        assert "-host: 10.10.1.103" in lines and "+host: 10.10.1.200" in lines
    runbook = (project / "build/prod/runbook.txt").read_text()
    assert re.search(r"gpu-node-03-prepare moves from 10\.10\.1\.103 to 10\.10\.1\.200: "
                     r"`pulumi up` runs its create command on 10\.10\.1\.200 and nothing on "
                     r"10\.10\.1\.103", runbook), runbook
