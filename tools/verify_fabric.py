#!/usr/bin/env python3
"""Bring-up check: compare a live `ibnetdiscover` dump with the planned fabric.

    ibnetdiscover > dump.txt          # on any host with an HCA on the fabric
    python tools/verify_fabric.py --plan build/prod/fabric --discovered dump.txt

`--plan` is the rendered fabric directory or its topology.net (node-name-map beside it
labels HCAs with their rail). Prints every miswired, missing and extra cable and every
missing or unexpected node by switch/port and host/rail, every HCA or switch whose GUID is not
the plan's (replaced: the inventory line to update), and every link not trained at 4xNDR.
Exit status: 0 the fabric matches, 1 differences found, 2 bad arguments or unreadable files.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.planning.fabric.verify import verify_files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, type=Path,
                    help="build/<stack>/fabric directory or its topology.net")
    ap.add_argument("--discovered", required=True, type=Path,
                    help="ibnetdiscover output ('-' for stdin)")
    ap.add_argument("--name-map", type=Path, help="node-name-map (default: beside the plan)")
    ap.add_argument("--rate", default="4xNDR",
                    help="report links not trained at this width and speed (default 4xNDR, "
                         "what ConnectX-7 and QM9700 train at 400 Gb/s; 'any' skips the check, "
                         "e.g. for ibsim, which knows no NDR)")
    ap.add_argument("--json", action="store_true", help="print findings as JSON")
    args = ap.parse_args(argv)

    plan = args.plan / "topology.net" if args.plan.is_dir() else args.plan
    name_map = args.name_map or plan.parent / "node-name-map"
    try:
        topology = plan.read_text()
        discovered = (sys.stdin.read() if str(args.discovered) == "-"
                      else args.discovered.read_text())
        names = name_map.read_text() if name_map.exists() else ""
    except OSError as e:
        print(f"verify_fabric: {e}", file=sys.stderr)
        return 2
    report = verify_files(topology, discovered, names,
                          None if args.rate == "any" else args.rate)
    if report.planned_nodes == 0:
        print(f"verify_fabric: {plan} holds no planned nodes", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"ok": report.ok, "findings": [asdict(f) for f in report.findings]},
                         indent=2))
    else:
        sys.stdout.write(report.text())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
