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

# helm (v4, static) and kubectl for the chart tests, into .tools/ (ignored): see hack/fetch_tools.py.
.PHONY: tools
tools: $(STAMP)
	$(PY) hack/fetch_tools.py .tools
