"""gpu-cluster: load and validate the stack config, build every layer, export a summary."""

from pathlib import Path

import pulumi

from components.model.fields import ConfigError
from components.planning import reboot
from components.planning.kubeadm import endpoint
from components.wiring.blueprint import build
from components.wiring.collector import tune_collector
from components.wiring.deployed import guarded_exports
from components.wiring.loading import load_config

tune_collector()
try:
    config, secrets = load_config(Path(__file__).parent)
except ConfigError as err:
    # A clean refusal: the CLI prints the problems, with no traceback, and registers nothing.
    raise pulumi.RunError(str(err)) from None
# A run of the real engine with too few parallel operations for the reboot queues.
slots = reboot.engine_slots_problem(len({n.su for n in config.nodes}),
                                    pulumi.runtime.settings.SETTINGS.parallel)
if slots is not None:
    raise pulumi.RunError(slots)
cluster = build(config, secrets)

pulumi.export("gpuNodes", [n.hostname for n in config.nodes])
pulumi.export("gpus", config.total_gpus)
if cluster.fabric_plan is not None:  # a split site's nodes and workloads parts plan none
    pulumi.export("fabric", {
        "switches": len(cluster.fabric_plan.switches),
        "cables": len(cluster.fabric_plan.cables),
        "bisectionTbps": cluster.fabric_plan.bisection_tbps,
        "oversubscription": cluster.fabric_plan.oversubscription_text(),
    })
pulumi.export("apiEndpoint", f"https://{endpoint(config)}")
guarded_exports(config)
if config.split is not None and cluster.kubernetes is not None \
        and cluster.kubernetes.stack_kubeconfig is not None:
    # Only for the other stacks of a split site (a StackReference): the stack's own identity,
    # a secret. People log in as themselves (docs/security.md, "People").
    pulumi.export("kubeconfig",
                  pulumi.Output.secret(cluster.kubernetes.stack_kubeconfig.stdout))
# A split part's readiness and facts, which the site's other parts check and read.
for key, value in cluster.site_exports.items():
    pulumi.export(key, value)
