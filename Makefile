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

native: $(STAMP)
	$(MAKE) -C native PYTHON=$(abspath $(PY))

protos: $(STAMP)
	$(PY) -m api.grpc.generate

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: native
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
