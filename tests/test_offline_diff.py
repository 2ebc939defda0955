"""Diff classification against rendered/<stack>, unit level and end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.offline_project import write_offline_stack
from support.project import run_offline

from offline.diff import (
    PHYSICAL_HEADING,
    changed_paths,
    classify,
    diff_trees,
    format_diff,
    path_matches,
)
from offline.render import to_yaml


def doc(type_: str, name: str, inputs: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {"urn": f"urn:pulumi:prod::gpu-cluster::{type_}::{name}", "type": type_,
            "name": name, "parent": None, "inputs": inputs,
            "options": {"protect": False, "replaceOnChanges": [], "provider": None, **options}}


DEPLOY = "kubernetes:apps/v1:Deployment"


def deployment(image: str = "a:1", selector: str = "x", replicas: int = 1) -> dict[str, Any]:
    return doc(DEPLOY, "vllm", {"metadata": {"name": "vllm"}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": selector}},
        "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})


def test_changed_paths_use_pulumi_property_paths() -> None:
    old = {"spec": {"containers": [{"image": "a:1"}], "x": 1},
           "metadata": {"labels": {"app.kubernetes.io/name": "a"}}}
    new = {"spec": {"containers": [{"image": "a:2"}, {"image": "b"}]},
           "metadata": {"labels": {"app.kubernetes.io/name": "b"}}}
    assert changed_paths(old, new) == [
        'metadata.labels["app.kubernetes.io/name"]',
        "spec.containers[0].image", "spec.containers[1]", "spec.x"]
    assert changed_paths({"a": [1, 2]}, {"a": [1, 2]}) == []


def test_path_matching_covers_children_ancestors_and_wildcards() -> None:
    assert path_matches("spec.selector.matchLabels.app", "spec.selector")
    assert path_matches("spec", "spec.selector")  # whole spec changed: may touch the selector
    assert not path_matches("spec.replicas", "spec.selector")
    assert path_matches("triggers[3]", "triggers[*]")
    assert not path_matches("metadata.labels.x", "metadata.name")
    assert path_matches('data["a.b"]', "data")


def test_update_lists_the_changed_path() -> None:
    change = classify(deployment(), deployment(image="a:2"), "workloads")
    assert change is not None and change.action == "update"
    assert change.paths == ["spec.template.spec.containers[0].image"]
    assert classify(deployment(), deployment(), "workloads") is None


def test_immutable_fields_force_replacement() -> None:
    change = classify(deployment(), deployment(selector="y", replicas=3), "workloads")
    assert change is not None and change.action == "replace"
    assert change.replace_because == ["spec.selector.matchLabels.app"]
    assert "spec.replicas" in change.paths

    pv = "kubernetes:core/v1:PersistentVolume"
    old = doc(pv, "ckpt", {"spec": {"csi": {"volumeHandle": "a@o2ib:/x"}, "capacity": "1Ti"}})
    new = doc(pv, "ckpt", {"spec": {"csi": {"volumeHandle": "b@o2ib:/x"}, "capacity": "1Ti"}})
    assert classify(old, new, "storage").action == "replace"  # type: ignore[union-attr]
    new2 = doc(pv, "ckpt", {"spec": {"csi": {"volumeHandle": "a@o2ib:/x"}, "capacity": "2Ti"}})
    assert classify(old, new2, "storage").action == "update"  # type: ignore[union-attr]


def test_command_host_and_replace_on_changes_option() -> None:
    cmd = "command:remote:Command"
    old = doc(cmd, "prep", {"connection": {"host": "10.0.0.1"}, "create": "a"})
    # pulumi-command 1.2 replaces on `triggers` only: a new host is an update, reported as the
    # CLI reports the (secret) connection, with the changed fields beneath it.
    moved = classify(old, doc(cmd, "prep", {"connection": {"host": "10.0.0.2"}, "create": "a"}),
                     "hardware")
    assert moved is not None and moved.action == "update" and moved.paths == ["connection"]
    assert moved.text_diffs["connection"][1:] == ["-host: 10.0.0.1", "+host: 10.0.0.2"]
    assert classify(old, doc(cmd, "prep", {"connection": {"host": "10.0.0.1"}, "create": "a",
                                           "triggers": ["v2"]}),
                    "hardware").action == "replace"  # type: ignore[union-attr]
    assert classify(old, doc(cmd, "prep", {"connection": {"host": "10.0.0.1"}, "create": "b"}),
                    "hardware").action == "update"  # type: ignore[union-attr]
    # A script with a secret in it (a subnet manager's config and its keys) is one secret to
    # the engine: the offline diff shows the lines, and says the CLI will not.
    sm = "sudo tee <<EOF\nsm_key [secret fabricSmKey version {}]\nsweep 10\nEOF\n"
    rotated = classify(doc(cmd, "sm", {"stdin": sm.format(1)}),
                       doc(cmd, "sm", {"stdin": sm.format(2)}), "fabric")
    assert rotated is not None and rotated.paths == ["stdin"]
    assert rotated.text_diffs["stdin"] == [
        "(`pulumi preview` shows [secret])",
        "-sm_key [secret fabricSmKey version 1]", "+sm_key [secret fabricSmKey version 2]"]
    plain = classify(doc(cmd, "p", {"stdin": "a\nb\n"}), doc(cmd, "p", {"stdin": "a\nc\n"}),
                     "hardware")
    assert plain is not None and "(`pulumi preview` shows [secret])" not in \
        plain.text_diffs["stdin"]
    # replaceOnChanges from the resource's own options.
    cm = "kubernetes:core/v1:ConfigMap"
    a = doc(cm, "c", {"data": {"k": "1"}}, replaceOnChanges=["data.*"])
    b = doc(cm, "c", {"data": {"k": "2"}}, replaceOnChanges=["data.*"])
    change = classify(a, b, "platform")
    assert change is not None and change.action == "replace"
    assert change.replace_because == ["data.k"]


def test_options_changes_are_updates_and_physical_changes_come_first() -> None:
    cmd = "command:remote:Command"
    old = {"hw.yaml": to_yaml(doc(cmd, "prep", {"create": "a"})),
           "wl.yaml": to_yaml(deployment()),
           "gone.yaml": to_yaml(doc(cmd, "gone", {}))}
    new = {"workloads/x/wl.yaml": to_yaml(deployment(image="b:1")),
           "hardware/x/hw.yaml": to_yaml(doc(cmd, "prep", {"create": "a"}, protect=True)),
           "fabric/y/new.yaml": to_yaml(doc(cmd, "new", {}))}
    diff = diff_trees(old, new)
    summary = [(c.action, c.name, c.layer) for c in diff.changes]
    assert summary == [("update", "prep", "hardware"), ("create", "new", "fabric"),
                       ("update", "vllm", "workloads"), ("delete", "gone", "stack")]
    assert diff.changes[0].paths == ["opts.protect"]


def test_script_changes_show_their_lines_once_for_identical_nodes() -> None:
    cmd = "command:remote:Command"
    script = "#!/bin/bash\nFS=xfs\nMOUNT=/scratch\n"
    old = {f"{h}.yaml": to_yaml(doc(cmd, f"{h}-prepare", {"stdin": script}))
           for h in ("n0", "n1", "n2")}
    new = {f"hardware/c/{h}.yaml": to_yaml(doc(cmd, f"{h}-prepare", {
        "stdin": script.replace("xfs", "ext4") if h != "n2" else script + "SWAP=off\n"}))
        for h in ("n0", "n1", "n2")}
    text = "\n".join(format_diff(diff_trees(old, new), "rendered/prod"))
    assert text.count("-FS=xfs") == 1 and text.count("+FS=ext4") == 1
    assert "the same change on 1 more: n1-prepare" in text
    assert "+SWAP=off" in text and "MOUNT=/scratch" not in text  # changed lines only


def render_then(project: Path, **change: Any) -> Any:
    proc = run_offline(project, "preview", "--render")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    write_offline_stack(project, **change)
    return run_offline(project, "preview")


def test_end_to_end_diff_classification(offline_project: Path) -> None:
    proc = render_then(
        offline_project,
        nodes=[{"name": "node-a", "ip": "10.0.1.9"}, {"name": "node-c", "ip": "10.0.1.3"}],
        image="nvcr.io/nvidia/pytorch:25.02-py3",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert ("Changes against rendered/prod: 2 to create, 2 to update, 0 to replace, "
            "2 to delete") in out
    physical = out.index(PHYSICAL_HEADING)
    other = out.index("Other changes:")
    # A new address is an update in pulumi-command 1.2 (only `triggers` replaces), shown as
    # the CLI shows it: the whole connection changed, [secret]; the fields beneath it.
    moved = out.index("update  command:remote:Command  node-a-prepare")
    assert physical < moved < other
    assert "~ connection" in out[moved:] and "+host: 10.0.1.9" in out[moved:]
    assert "replaced because" not in out
    assert physical < out.index("delete  gpucluster:hardware:BareMetalNode  node-b") < other
    assert physical < out.index("create  command:remote:Command  node-c-prepare") < other
    deploy = out.index("update  kubernetes:apps/v1:Deployment  vllm")
    assert deploy > other
    assert out.index("~ spec.template.spec.containers[0].image", deploy)
    # Only its dependencies changed: like the engine, that is not an update.
    assert "Command  admin-kubeconfig" not in out


@pytest.mark.slow
def test_render_then_check_rendered(offline_project: Path) -> None:
    proc = run_offline(offline_project, "preview", "--render")
    assert proc.returncode == 0, proc.stderr
    assert "no changes against rendered/prod" in run_offline(offline_project, "preview").stdout
    ok = run_offline(offline_project, "check-rendered")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "rendered/prod is up to date (15 resources)" in ok.stdout

    write_offline_stack(offline_project, nodes=[{"name": "node-a", "ip": "10.0.1.1"}])
    stale = run_offline(offline_project, "check-rendered")
    assert stale.returncode == 1
    assert "delete  command:remote:Command  node-b-prepare" in stale.stdout
    assert "run `make render`" in stale.stdout
    gone = offline_project / "rendered/prod/hardware/command-remote-Command/node-b-prepare.yaml"
    assert gone.exists()

    # --render removes files of resources that no longer exist, then the check passes again.
    assert run_offline(offline_project, "preview", "--render").returncode == 0
    assert not gone.exists()
    assert run_offline(offline_project, "check-rendered").returncode == 0

    # A hand-edit that changes only formatting is still caught.
    vllm = offline_project / "rendered/prod/platform/kubernetes-apps-v1-Deployment/vllm.yaml"
    vllm.write_text(yaml.safe_dump(yaml.safe_load(vllm.read_text()), indent=4))
    reformatted = run_offline(offline_project, "check-rendered")
    assert reformatted.returncode == 1
    assert "1 files differ only in formatting" in reformatted.stdout


def test_a_changed_value_shows_old_and_new_in_the_text_and_the_json() -> None:
    """An image tag bump says which tag it was and which it becomes, not only the path."""
    import json

    from offline.diff import diff_json

    change = classify(deployment(replicas=2), deployment(image="a:2", replicas=3), "workloads")
    assert change is not None
    assert change.values == {"spec.replicas": (2, 3),
                             "spec.template.spec.containers[0].image": ("a:1", "a:2")}
    text = "\n".join(format_diff(diff_trees(
        {"w.yaml": to_yaml(deployment(replicas=2))},
        {"w.yaml": to_yaml(deployment(image="a:2", replicas=3))}), "rendered/prod"))
    assert '~ spec.template.spec.containers[0].image: "a:1" → "a:2"' in text
    assert "~ spec.replicas: 2 → 3" in text
    row = json.loads(diff_json(diff_trees({"w.yaml": to_yaml(deployment())},
                                          {"w.yaml": to_yaml(deployment(image="a:2"))})))[0]
    assert row["values"] == {"spec.template.spec.containers[0].image": {"old": "a:1",
                                                                         "new": "a:2"}}


def test_added_keys_show_as_absent_and_scripts_keep_their_line_diff() -> None:
    old = doc("command:remote:Command", "x", {"create": "a\nb\n"})
    new = doc("command:remote:Command", "x", {"create": "a\nc\n", "delete": "true"})
    change = classify(old, new, "bootstrap")
    assert change is not None
    assert change.values == {"delete": (None, "true")}
    assert change.text_diffs == {"create": ["-b", "+c"]}


def test_a_change_of_dependencies_alone_is_named_not_called_formatting() -> None:
    """The engine updates nothing when only `dependsOn` changes, but `pulumi up` then orders
    the resource differently (a wait placed after another release, say): a reviewer sees
    which dependency came and went, not "files differ only in formatting"."""
    release = "urn:pulumi:prod::gpu-cluster::kubernetes:helm.sh/v3:Release::"
    old = deployment()
    new = deployment()
    old["options"]["dependsOn"] = [release + "gpu-operator"]
    new["options"]["dependsOn"] = [release + "network-operator"]
    diff = diff_trees({"w.yaml": to_yaml(old)}, {"w.yaml": to_yaml(new)})
    assert not diff.changes and not diff.reformatted and not diff.empty
    lines = format_diff(diff, "rendered/prod")
    assert lines[-2:] == ["Dependencies only (1: no update; `pulumi up` orders them by these):",
                          "   ~ vllm: +network-operator, -gpu-operator"]


def test_an_added_list_element_shows_its_value() -> None:
    """A node added to a HyperNode is `spec.members[2]`: the diff says which member it is."""
    def hypernode(*nodes: str) -> dict[str, Any]:
        return doc("kubernetes:topology.volcano.sh/v1alpha1:HyperNode", "su1", {"spec": {
            "tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": n}}}
                                   for n in nodes]}})
    text = "\n".join(format_diff(diff_trees(
        {"h.yaml": to_yaml(hypernode("gpu-node-00", "gpu-node-01"))},
        {"h.yaml": to_yaml(hypernode("gpu-node-00", "gpu-node-01", "gpu-node-08"))}),
        "rendered/prod"))
    assert ('~ spec.members[2]: (absent) → {"selector": {"exactMatch": {"name": "gpu-node-08"}}, '
            '"type": "Node"}') in text
