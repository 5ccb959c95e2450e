# namesrv: `make run` starts a NameServer on 9876, `make test` runs every test, `make bench` a short storm + report.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONF ?= conf/namesrv.properties

.PHONY: install run test bench codec-bench clean

$(STAMP): requirements.txt setup.py pyproject.toml namesrv/_fastpath.pyx
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-build-isolation --no-deps -e .
	$(BIN)/python setup.py --quiet build_ext --inplace
	$(BIN)/python -c "import namesrv.fastpath as f; print('namesrv fast path:', f.IMPLEMENTATION)"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/namesrv -c $(CONF)

test: $(STAMP)
	$(BIN)/python -m pytest

codec-bench: $(STAMP)
	$(BIN)/python -m pytest bench/codec_bench.py -q -s --benchmark-disable-gc

clean:
	rm -rf build $(VENV) namesrv/*.so namesrv/_fastpath.c .pytest_cache .benchmarks
