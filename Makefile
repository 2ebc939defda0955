# gpu-cluster — two commands on a fresh machine: `make preview` and `make test`.
STACK ?= prod
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEB_PACKAGES := opensm ibsim-utils infiniband-diags shellcheck bubblewrap openssl nftables
DISCOVERED ?=

.PHONY: preview render test test-fast bench lint verify-fabric deps clean engine k8s-tools twin e2e lock

# requirements*.txt are lock files (every package, transitive ones too, pinned with the
# sha256 of each of its files): pip refuses anything not in them or not matching a hash.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.txt
	touch $@

# Regenerate the lock files from requirements.in, requirements-dev.in and
# policies/requirements.in (edit those, then run this and commit both). Pins already in a lock
# are kept unless an .in file changes them; LOCK_FLAGS=--upgrade moves everything to the newest
# release. pip-tools runs from its own virtualenv, never from $(VENV).
LOCK_VENV ?= build/pip-tools
PIP_TOOLS_VERSION := 7.6.2
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet \
	--generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	$(LOCK_FLAGS)
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && \
	  $(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check pip-tools==$(PIP_TOOLS_VERSION); }
	$(PIP_COMPILE) --output-file requirements.txt requirements.in
	$(PIP_COMPILE) --output-file requirements-dev.txt requirements-dev.in
	$(PIP_COMPILE) --output-file policies/requirements.txt policies/requirements.in

# Debian packages the tests use: the real subnet manager, the fabric simulator, diagnostics
# and shellcheck. Installed when root; otherwise the command is printed.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing Debian packages:$$missing"; \
	    echo "run: sudo apt-get install -y$$missing"; \
	  fi; \
	fi

preview: $(VENV)/.installed
	$(PY) -m offline preview --stack $(STACK) $(if $(POLICY_PACK),--policy-pack $(POLICY_PACK))

render: $(VENV)/.installed
	$(PY) -m offline preview --stack $(STACK) --render

test: $(VENV)/.installed deps k8s-tools
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not e2e"

# The developer loop: lint, types and the tests not marked `slow` (those need the subnet
# manager, the twin's control plane, the Pulumi CLI or other built tools), on every core.
test-fast: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not slow" -n auto

bench: $(VENV)/.installed
	$(PY) -m offline bench

verify-fabric: $(VENV)/.installed
	@test -n "$(DISCOVERED)" || { echo "usage: make verify-fabric DISCOVERED=ibnetdiscover-dump.txt [STACK=prod] [RATE=4xNDR|any] [FABRIC=storage]"; exit 2; }
	@! grep -q '^ *gpu-cluster:site:' Pulumi.$(STACK).yaml 2>/dev/null || { echo "verify-fabric: $(STACK) plans no fabric (a split site's fabric is its core part's): run it with STACK=<the core stack>, the gpu-cluster:site of Pulumi.$(STACK).yaml" >&2; exit 2; }
	@# The plan must be this config's: a preview that fails (exit 2: config error) leaves
	@# build/ stale. Exit 3 (a policy violation) still renders the fabric.
	@$(PY) -m offline preview --stack $(STACK) --quiet >/dev/null; rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 3 ]; then \
	    echo "verify-fabric: the preview of $(STACK) failed (exit $$rc), so build/$(STACK)/fabric is not this config's plan; fix the config (make preview STACK=$(STACK))" >&2; exit 2; fi
	@test -z "$(FABRIC)" || test -f build/$(STACK)/storage-fabric/topology.net || { echo "verify-fabric: $(STACK) has no storage fabric (fabric.storageFabric); leave FABRIC out to check the compute fabric" >&2; exit 2; }
	$(PY) tools/verify_fabric.py --plan build/$(STACK)/$(if $(FABRIC),storage-fabric,fabric)/topology.net --discovered $(DISCOVERED) $(if $(RATE),--rate $(RATE))

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The real Pulumi engine (CLI, Python language host, command and kubernetes providers), built
# from its Go modules into a cache; prints the bin directory to put on PATH.
engine:
	bash tools/engine/build.sh

# The cluster twin's control plane (kube-apiserver, controller-manager, scheduler, kubectl, etcd,
# KWOK, Volcano, the Training Operator), built from their Go modules into a cache; prints the
# bin directory.
k8s-tools:
	bash tools/k8s/build.sh

# The prod rendering applied to the twin in `pulumi up` order: every object to a real API
# server, every pod to the real schedulers (kube-scheduler, Volcano) over KWOK nodes of the
# plan, and the checks of twin/checks.py (build/twin/).
twin: $(VENV)/.installed deps k8s-tools
	$(PY) -m twin --stack $(STACK)

# End to end: what runs without hardware against real engines: the cluster twin, then the real
# Pulumi engine (`make engine`) against the offline preview and on the simulated data centre.
e2e: twin engine
	$(PY) -m pytest -q -m e2e

clean:
	rm -rf build $(VENV)
