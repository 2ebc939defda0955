module gpu-cluster.local/tools/datacentre/hostsim

go 1.24.0

require (
	golang.org/x/crypto v0.48.0
	golang.org/x/sys v0.41.0
)
