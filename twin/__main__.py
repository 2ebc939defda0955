"""`python -m twin [--stack prod]`: render the stack offline, apply it to the twin, report.

Exit 0 when the API server accepted every object and every pod the default scheduler owns has a
node; 1 otherwise; 2 when the twin cannot start (binaries missing: `make k8s-tools`).
Writes build/twin/: pods.json, nodes.json, events.txt, report.json and logs/ (each component's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from components.config import validate_cluster
from components.planning.nodes import planned_nodes
from components.planning.platform import training_operator_kustomization
from offline.stackconfig import load_stack_config

from .controlplane import ControlPlane, ControlPlaneError
from .run import TwinReport, apply_stack, settle, training_operator, write

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin", description=__doc__.splitlines()[0])
    ap.add_argument("--stack", default="prod")
    ap.add_argument("--bin", type=Path, help="directory with the built binaries "
                    "(default: what tools/k8s/build.sh prints)")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "twin")
    ap.add_argument("--rendering", type=Path, help="apply this build/<stack> directory as it "
                    "is instead of rendering the stack first")
    args = ap.parse_args(argv)
    bin_dir = args.bin
    if bin_dir is None:
        built = subprocess.run(["bash", str(REPO / "tools/k8s/build.sh")], capture_output=True,
                               text=True)
        if built.returncode != 0:
            print(built.stderr[-3000:], file=sys.stderr)
            print("twin: the control plane could not be built (see above)", file=sys.stderr)
            return 2
        bin_dir = Path(built.stdout.strip().splitlines()[-1])
    rendering = args.rendering or REPO / "build" / args.stack
    if args.rendering is None:
        preview = subprocess.run([sys.executable, "-m", "offline", "preview", "--stack",
                                  args.stack, "--quiet"], cwd=REPO, capture_output=True,
                                 text=True)
        if preview.returncode not in (0, 3):
            print(preview.stdout + preview.stderr, file=sys.stderr)
            return 2

    raw = json.loads(load_stack_config(REPO, args.stack).config["gpu-cluster:cluster"])
    cluster = validate_cluster(raw, REPO)
    shutil.rmtree(args.out, ignore_errors=True)
    # The control plane's keys, certificates and etcd data stay in a scratch directory, never
    # under build/; only the components' logs are kept.
    work = Path(tempfile.mkdtemp(prefix="gpu-cluster-twin-"))
    report = TwinReport(stand_ins=[
        "every host: a KWOK node with the planned labels, taints and allocatable resources",
        "Volcano: not built (the module proxy does not serve volcano.sh/apis), so pods for "
        "its scheduler are listed, not judged"])
    try:
        with ControlPlane(bin_dir, work, str(cluster.kubernetes.service_cidr)) as cp:
            apply_stack(cp, rendering, args.shared, planned_nodes(cluster), report)
            version = cluster.platform.training_operator.version
            training_operator(cp, training_operator_kustomization(version), version, work,
                              report)
            pods = settle(cp, report)
            write(args.out, cp, pods, report)
    except ControlPlaneError as err:
        print(f"twin: {err}", file=sys.stderr)
        return 2
    finally:
        logs = args.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for log in work.glob("*.log"):
            shutil.copy(log, logs / log.name)
        shutil.rmtree(work, ignore_errors=True)
    for line in report.lines():
        print(line)
    print(f"Wrote {args.out}/")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
