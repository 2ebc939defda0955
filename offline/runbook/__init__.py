"""The ordered physical work a diff implies: what a technician does, in which order, and the
checks afterwards. Read from the diff alone, so it works for any two renderings.

Its inputs are the stack's resources, each by its role, looked up in the stack's vocabulary of
names (policies/gpu_guardrails/resource_names.py, through offline/conventions.py): a host's
membership (its delete drains), its join (its delete resets), a switch's port map (one
`interface ib 1/<port> description "<peer> [<media> <length>]"` line per cable), the subnet
managers' files, a GPU node's planned reboot (re-created when its boot settings change), the
KubeletConfiguration joining nodes read, the init's settings (applied once), Helm releases
named after their chart; and what the kubeadm cluster publishes (its Kubernetes release).

  cabling.py   cables moved, pulled, plugged; switches racked and retired
  upgrade.py   the Kubernetes upgrade: versions, batches per SU, drains, gang waits
  settings.py  what kubeadm applies once: the kubelet's configuration, the control plane's
  hosts.py     hosts leaving, joining, drained, rebooted, re-prepared; the subnet managers
  assembly.py  the numbered steps and the checks, in a technician's order
"""

from .assembly import runbook

__all__ = ["runbook"]
