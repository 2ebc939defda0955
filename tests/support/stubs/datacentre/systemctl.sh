#!/bin/bash
# Stand-in: systemctl of a simulated Kubernetes host, over the sandbox's stub
# (systemctl-sandbox, which does the unit's part): a kubelet that restarts reports the version
# of its package to the API server, as its Node's status.nodeInfo.kubeletVersion.
/stub/bin/systemctl-sandbox "$@" || exit $?
C=/stub/state/cluster
case " $* " in
  *" restart kubelet "*|*" restart kubelet.service "*)
    if [ -e "$C/nodes/$(hostname)" ]; then
      echo "v$(cut -d- -f1 /stub/state/pkgs/kubelet)" > "$C/kubelet/$(hostname)"
    fi ;;
esac
