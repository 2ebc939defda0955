"""The ordered physical work a diff implies: what a technician does, in which order, and the
checks afterwards. Read from the diff alone, so it works for any two renderings.

Its inputs are conventions of the stack's resources: `<host>-member` (cluster membership, its
delete drains), `<host>-kubeadm-join` (its delete resets), `<switch>-config` (a switch's port
map, one `interface ib 1/<port> description "<peer> [<media> <length>]"` line per cable),
`<host>-opensm` (subnet-manager files), `<host>-reboot` (a GPU node's planned reboot, re-created
when its boot settings change), `kubelet-config` (the KubeletConfiguration joining nodes
read), `<host>-kubeadm-init` (settings applied once), Helm releases named after their chart.

  cabling.py   cables moved, pulled, plugged; switches racked and retired
  upgrade.py   the Kubernetes upgrade: versions, batches per SU, drains, gang waits
  settings.py  what kubeadm applies once: the kubelet's configuration, the control plane's
  hosts.py     hosts leaving, joining, drained, rebooted, re-prepared; the subnet managers
  assembly.py  the numbered steps and the checks, in a technician's order
"""

from .assembly import runbook

__all__ = ["runbook"]
