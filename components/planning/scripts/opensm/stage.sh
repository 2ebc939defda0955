# shellcheck shell=bash disable=SC2154
#: One file in apply.sh's staging directory ($stage), as it is to be installed.
cat > "$stage/@i@" <<'GPU_CLUSTER_EOF'
# @text@
GPU_CLUSTER_EOF
