# carve: `make demo` and `make test` work on a fresh clone with Python 3.11, gcc and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all venv native protos test test-frameworks unit demo lint mutate mutate-changed bench bench-scale soak image release e2e e2e-legacy e2e-all e2e-kind cluster cluster-up containerd clean
all: native

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

venv: $(STAMP)

CUDA_HOME ?= /usr/local/cuda
CUDA_HEADERS_WHEEL := nvidia-cuda-runtime>=13,<14

# cuda.h comes from CUDA_HOME; a machine without a CUDA toolkit gets the headers from a 2 MB wheel.
native: $(STAMP)
	@test -f $(CUDA_HOME)/include/cuda.h || $(PY) -c 'import glob,nvidia,sys; sys.exit(not any(glob.glob(d + "/*/include/cuda.h") for d in nvidia.__path__))' \
	  || { echo "no cuda.h in $(CUDA_HOME)/include: installing the CUDA headers from PyPI ($(CUDA_HEADERS_WHEEL))"; \
	       $(PY) -m pip install -q --disable-pip-version-check '$(CUDA_HEADERS_WHEEL)'; }
	$(MAKE) -C native PYTHON=$(abspath $(PY)) CUDA_HOME=$(CUDA_HOME)

protos: $(STAMP)
	$(PY) -m api.grpc.generate

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Everything CI runs before the e2e: ruff, the suite, then the real CUDA runtimes, CuPy and PyTorch on the fake
# GPUs in their cached environment (test-frameworks: 2.8 GB of wheels, downloaded once per machine).
test: native tools test-runc test-deps
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider tests
	$(MAKE) test-frameworks

# The hook's escape tests run it under real runc (tests/integration/hook/test_hook_runc.py): install
# Debian's runc when missing and we may (root); otherwise those tests skip, naming the reason.
.PHONY: test-runc
test-runc:
	@command -v runc >/dev/null || [ "$$(id -u)" != 0 ] || { echo "installing Debian's runc for the hook tests"; \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends runc; } \
	  || echo "runc could not be installed: tests/integration/hook/test_hook_runc.py will be skipped"

# Generated mutation testing (docs/testing.md, "Generated mutants"): MUTATE_SAMPLE valid mutants of each
# package of hack/mutation_packages.yaml, the score per package (killed / run) against its goal.
MUTATE_SAMPLE ?= 40
MUTATE_BUDGET ?= 7200
MUTATE_PACKAGES ?= driver/plugin driver/limits driver/allocator native/src
mutate: native
	nice -n 5 $(PY) hack/mutate_generated.py --full --sample $(MUTATE_SAMPLE) --budget $(MUTATE_BUDGET) \
	  $(addprefix --package ,$(MUTATE_PACKAGES)) $(MUTATE_ARGS)

# What CI runs after `make test`: the lines changed since SINCE (default: see docs/testing.md), time-boxed.
mutate-changed: native
	nice -n 5 $(PY) hack/mutate_generated.py --changed-since $(SINCE) --budget $${CARVE_MUTATE_BUDGET_S:-300} \
	  --max-mutants $${CARVE_MUTATE_MAX:-24}

demo: native
	$(VENV)/bin/carve demo

# Real CUDA clients through the limiter (docs/limiter.md, "Real CUDA clients"): the cudart 12/13 program, CuPy
# and PyTorch on the fake GPUs, with and without the limiter. Their wheels (2.8 GB) live in a venv cached
# outside the repo, keyed by tests/frameworks/requirements.txt (hack/frameworks_env.py: cold about 2.5 min,
# then reused by every clone on the machine); `make test` leaves tests/frameworks to this target.
FRAMEWORKS_ENV = $(PY) hack/frameworks_env.py
test-frameworks: native
	@py=$$($(FRAMEWORKS_ENV)) && CARVE_FRAMEWORKS_PYTHON=$$py $(PY) -m pytest -q -p no:cacheprovider tests/frameworks

# Every benchmark, with the framework environment: the limiter's figures through cudart, CuPy and PyTorch too.
bench: native
	@py=$$($(FRAMEWORKS_ENV)) && CARVE_FRAMEWORKS_PYTHON=$$py $(PY) -m pytest -q -s -p no:cacheprovider tests/benchmarks

# The 1,000-claim node (docs/reliability.md): the same benchmark `make test` runs with 200 claims.
bench-scale: native
	CARVE_BENCH_CLAIMS=1000 $(PY) -m pytest -q -s -p no:cacheprovider tests/benchmarks/test_node_1000_claims.py

# The container image: the Dockerfile built by buildah into dist/carve-<version>.oci.tar (docs/install.md,
# "The image"). BASE=debian (default) makes the base from Debian's packages; BASE=python:3.11-slim-bookworm
# pulls the Dockerfile's own default. IMAGE names the result (default localhost/carve).
image:
	./hack/build_image.sh

# Every artifact of a release, versioned (pyproject's version), into dist/ (docs/install.md, "Installing from
# a release"): the image archive (as `make image`), the chart .tgz (values schema checked against the plugin's
# validation), the CLI wheel with the native build inside, and carve-<version>.sha256 over them.
release: native tools
	nice -n $(NICE) ./hack/release.sh

# The e2e on a local control plane built from the Kubernetes Go modules (docs/e2e.md).
# K8S picks the minor (e2e/cluster/<minor>/go.mod pins the patch); GATES=off runs it without consumable capacity,
# partitionable devices and device taints (what the minor does not lock on: e2e/cluster/versions.py).
K8S ?= 1.37
GATES ?= on
RUNTIME ?= containerd
PLUGIN_MODE ?= host
NICE ?= 10
K8S_VERSION = $(shell sed -n 's/^\trequire k8s.io\/kubernetes //p; s/^\tk8s.io\/kubernetes \(v[0-9][0-9a-z.-]*\)$$/\1/p' e2e/cluster/$(K8S)/go.mod)
K8S_BIN = .tools/k8s/$(K8S_VERSION)/k8s
# 1.29 still has in-tree cloud providers: leave them out (k8s.io/legacy-cloud-providers, docs/e2e.md).
K8S_TAGS_1.29 = ,providerless
# A minor whose go.mod needs a newer Go than the machine's: the Go module proxy serves that toolchain
# (golang.org/toolchain), which the go command fetches and runs by itself (README, docs/e2e.md).
K8S_GO_1.38 = GOTOOLCHAIN=go1.27.4

cluster:
	@test -n "$(K8S_VERSION)" || { echo "no e2e/cluster/$(K8S)/go.mod: known minors are $$(ls e2e/cluster | grep '^1\.' | tr '\n' ' ')"; exit 2; }
	@test -f e2e/cluster/$(K8S)/go.sum || { echo "e2e/cluster/$(K8S) has no go.sum: its modules do not resolve from the Go module proxy yet (docs/e2e.md)"; exit 2; }
	@if [ -x $(K8S_BIN) ]; then echo "$(K8S_BIN) is built"; else \
	  mkdir -p $(dir $(K8S_BIN)); start=$$(date +%s); \
	  echo "building Kubernetes $(K8S_VERSION) into $(K8S_BIN) (cold: tens of minutes on 2 cores; see docs/e2e.md)"; \
	  cd e2e/cluster/$(K8S) && $(K8S_GO_$(K8S)) CGO_ENABLED=0 GOFLAGS=-trimpath nice -n $(NICE) go build -tags selinux,notest$(K8S_TAGS_$(K8S)) \
	    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(K8S))) -X k8s.io/component-base/version.gitTreeState=clean" \
	    -o $(abspath $(K8S_BIN)).tmp . && mv $(abspath $(K8S_BIN)).tmp $(abspath $(K8S_BIN)) && \
	  echo "built $(K8S_BIN) in $$(( $$(date +%s) - start )) s"; fi

cluster-up: native cluster $(if $(filter containerd,$(RUNTIME)),containerd)
	$(PY) -m e2e.cluster.launcher --k8s $(K8S) --gates $(GATES) --runtime $(RUNTIME) --plugin-mode $(PLUGIN_MODE)

# e2e/test_monitoring.py runs Debian's prometheus beside the cluster: installed with apt when missing
# (hack/test_deps.sh, waiting for the dpkg lock); without it that test fails, naming the package.
.PHONY: e2e-deps
e2e-deps:
	hack/test_deps.sh prometheus

e2e: native tools cluster kueue e2e-deps $(if $(filter containerd,$(RUNTIME)),containerd)
	CARVE_E2E_K8S=$(K8S) CARVE_E2E_GATES=$(GATES) CARVE_E2E_RUNTIME=$(RUNTIME) $(PY) -m pytest -q -s -p no:cacheprovider e2e

# Only the legacy shim's tests (marker `legacy`); on 1.29 (no DRA) `make e2e` runs the same and skips the rest.
e2e-legacy: native tools cluster $(if $(filter containerd,$(RUNTIME)),containerd)
	CARVE_E2E_K8S=$(K8S) CARVE_E2E_GATES=$(GATES) CARVE_E2E_RUNTIME=$(RUNTIME) $(PY) -m pytest -q -s -p no:cacheprovider -m legacy e2e

# A soak on the e2e cluster (docs/reliability.md): SOAK_MINUTES of pods of every kind while seeded faults hit.
SOAK_MINUTES ?= 10
SOAK_SEED ?= 1
soak: native tools cluster $(if $(filter containerd,$(RUNTIME)),containerd)
	@command -v faketime >/dev/null || apt-get -o DPkg::Lock::Timeout=600 install -y -qq faketime \
	  || echo "soak: no faketime (apt-get install faketime): the clock-skew fault is left out"
	CARVE_E2E_K8S=$(K8S) CARVE_E2E_GATES=$(GATES) CARVE_E2E_RUNTIME=$(RUNTIME) SOAK_MINUTES=$(SOAK_MINUTES) \
	  SOAK_SEED=$(SOAK_SEED) $(PY) -m e2e.soak

e2e-all: native tools
	$(MAKE) e2e K8S=1.38
	$(MAKE) e2e K8S=1.37
	$(MAKE) e2e K8S=1.37 GATES=off
	$(MAKE) e2e K8S=1.36
	$(MAKE) e2e K8S=1.35
	$(MAKE) e2e K8S=1.35 GATES=off
	$(MAKE) e2e K8S=1.34
	$(MAKE) e2e K8S=1.34 GATES=off
	$(MAKE) e2e-legacy K8S=1.29

# Kueue's manager for e2e/test_kueue.py (docs/kueue.md): sigs.k8s.io/kueue/cmd/kueue at the version
# e2e/kueue/go.mod pins (go.sum checks every module), built once into .tools/kueue/<version>/kueue.
KUEUE_VERSION = $(shell sed -n 's/^\tsigs.k8s.io\/kueue \(v[0-9][0-9a-z.-]*\).*/\1/p' e2e/kueue/go.mod)
KUEUE_BIN = .tools/kueue/$(KUEUE_VERSION)/kueue

.PHONY: kueue
kueue:
	@if [ -x $(KUEUE_BIN) ]; then echo "$(KUEUE_BIN) is built"; else \
	  mkdir -p $(dir $(KUEUE_BIN)); start=$$(date +%s); \
	  echo "building Kueue $(KUEUE_VERSION) into $(KUEUE_BIN)"; \
	  cd e2e/kueue && CGO_ENABLED=0 GOFLAGS=-trimpath nice -n $(NICE) go build -ldflags "-s -w" \
	    -o $(abspath $(KUEUE_BIN)).tmp sigs.k8s.io/kueue/cmd/kueue && mv $(abspath $(KUEUE_BIN)).tmp $(abspath $(KUEUE_BIN)) && \
	  echo "built $(KUEUE_BIN) in $$(( $$(date +%s) - start )) s"; fi

# The nodes' real container runtime (docs/e2e.md): containerd, ctr and the runc shim from the containerd Go
# module at a pinned version, Debian's runc and CNI plugins. RUNTIME=fakecri runs upstream's fake CRI instead.
CONTAINERD_VERSION = $(shell sed -n 's/^CONTAINERD_VERSION = "\(.*\)"/\1/p' e2e/cluster/containerd.py)
CONTAINERD_BIN = .tools/containerd/$(CONTAINERD_VERSION)/bin

containerd:
	@command -v runc >/dev/null && test -x /usr/lib/cni/bridge && command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || { \
	  echo "installing Debian's runc, CNI plugins, buildah and mmdebstrap (real containers, and the carve image of the DaemonSet e2e)"; \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends runc containernetworking-plugins buildah mmdebstrap; } \
	  || { echo "containerd runtime needs: apt-get install -y runc containernetworking-plugins buildah mmdebstrap (as root), or RUNTIME=fakecri"; exit 2; }
	@if [ -x $(CONTAINERD_BIN)/containerd -a -x $(CONTAINERD_BIN)/ctr -a -x $(CONTAINERD_BIN)/containerd-shim-runc-v2 ]; then echo "$(CONTAINERD_BIN) is built"; else \
	  mkdir -p $(CONTAINERD_BIN); start=$$(date +%s); \
	  GOBIN=$(abspath $(CONTAINERD_BIN)) CGO_ENABLED=0 nice -n $(NICE) go install -trimpath -tags no_btrfs,no_devmapper,no_zfs -ldflags "-s -w" \
	    $(foreach c,containerd ctr containerd-shim-runc-v2,github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD_VERSION)) && \
	  echo "built containerd $(CONTAINERD_VERSION) into $(CONTAINERD_BIN) in $$(( $$(date +%s) - start )) s"; fi
	$(PY) -m e2e.cluster.images

# The e2e on a user's own cluster (kind), as before: e2e/README.md.
e2e-kind: native
	CARVE_E2E_TARGET=kind $(PY) -m pytest -q -s -p no:cacheprovider e2e/kind

clean:
	$(MAKE) -C native clean
	rm -rf $(VENV)

# promtool and chromium (Debian packages) for the alert-rule and HTML-report tests: hack/test_deps.sh.
.PHONY: test-deps
test-deps:
	hack/test_deps.sh

# helm (v4, static) and kubectl for the chart tests, into .tools/ (ignored): see hack/fetch_tools.py.
.PHONY: tools
tools: $(STAMP)
	$(PY) hack/fetch_tools.py .tools
