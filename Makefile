# namesrv: `make run` starts a NameServer on 9876, `make test` runs every test, `make bench` finds the knee + report.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.dev-installed
CONF ?= conf/namesrv.properties
# What `make run` serves: a copy of $(CONF) made on its first run, in git-ignored local/. The server rewrites
# the file it serves (UPDATE_NAMESRV_CONFIG), so the tracked $(CONF) stays as shipped. RUN_ARGS: --key=value overrides.
RUN_CONF ?= local/namesrv.properties
RUN_ARGS ?=

.PHONY: install install-dev run test bench codec-bench clean

$(STAMP): requirements.txt setup.py pyproject.toml namesrv/_fastpath.pyx $(wildcard namesrv/fastpath/*.pxi)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-build-isolation --no-deps -e .
	$(BIN)/python setup.py --quiet build_ext --inplace
	$(BIN)/python -c "import namesrv.fastpath as f; print('namesrv fast path:', f.IMPLEMENTATION)"
	touch $(STAMP)

# The runtime only (`make run`); tests, benchmarks and reports add requirements-dev.txt (PySpark included).
$(DEV_STAMP): requirements-dev.txt $(STAMP)
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

run: $(STAMP)
	@if [ ! -e $(RUN_CONF) ]; then mkdir -p $(dir $(RUN_CONF)) && cp $(CONF) $(RUN_CONF) && \
		echo "make run: first run: copied $(CONF) to $(RUN_CONF) (local/ is git-ignored)"; fi
	@echo "make run: serving $(RUN_CONF): edit it to configure; runtime updates are written there, never to $(CONF)"
	$(BIN)/namesrv -c $(RUN_CONF) $(RUN_ARGS)

test: $(DEV_STAMP)
	NAMESRV_REQUIRE_EXTENSION=1 $(BIN)/python -m pytest

# `make bench`: the knee of a fresh namesrv and, when Java 17 is present, of the Java NameServer 4.9.8 of
# ../shared in the same run (`python -m bench knee`: searches alternate step by step, each knee and its lowest
# miss run twice, the servers and the generator on CPUs of their own), then the Spark report, whose first screen
# is the verdict and the knee chart. The fleet: 128 brokers (64 masters + 64 slaves, 2 clusters, 200 topics of 8
# queues) registering every 2 s and 5000 clients asking for a random topic's route every 1 s, 5,064 requests/s,
# scaled up and down by the search with the mix kept. No BROKER_HEARTBEAT: Java 4.9.8 does not answer it.
# SLO: every kind's p99 within 5 ms. `python -m bench` lists every other verb.
BENCH_OUT := runs/bench-$(shell date +%Y%m%d-%H%M%S)
BENCH_FLEET ?= --brokers 128 --topics 200 --queues 8 --clusters 2 --register-period 2 --heartbeat-period 0 \
	--route-clients 5000 --route-poll-period 1
BENCH_SEARCH ?= --java auto --slo-ms 5 --seconds 5 --warmup 1.5 --prime 8 --max-steps 6 --resolution 0.15
bench: $(DEV_STAMP)
	$(BIN)/python -m bench knee --launch --out $(BENCH_OUT) $(BENCH_FLEET) $(BENCH_SEARCH)
	$(BIN)/python -m bench report $(BENCH_OUT) --out $(BENCH_OUT)/report --title "namesrv against Java: the knee"
	@echo "bench report: $(BENCH_OUT)/report/report.html (searches in $(BENCH_OUT))"

codec-bench: $(DEV_STAMP)
	$(BIN)/python -m bench codec

clean:
	rm -rf build $(VENV) namesrv/*.so namesrv/_fastpath.c .pytest_cache .benchmarks

# `make fuzz`: the atheris harnesses in fuzz/ for FUZZ_SECONDS in all; crash inputs land in fuzz/crashes/.
FUZZ_SECONDS ?= 60
FUZZ_STAMP := $(VENV)/.fuzz-installed

$(FUZZ_STAMP): requirements-fuzz.txt $(DEV_STAMP)
	$(BIN)/pip install --quiet -r requirements-fuzz.txt
	touch $(FUZZ_STAMP)

.PHONY: fuzz
fuzz: $(FUZZ_STAMP)
	$(BIN)/python -m fuzz.run --seconds $(FUZZ_SECONDS)
