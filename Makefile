# The two set-up commands: `make demo` and `make test`. Both start from nothing but the machine's
# Python 3.11+, Java 17+, Maven and the package registries.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
KAFKA := deploy/kafka/kafka.sh
TEST_PORT ?= 19092
DEMO_PORT ?= 9092
PYTEST_ARGS ?=

.PHONY: venv test test-unit demo broker-start broker-stop bench clean

# the bench extra: the benchmarks' peers, which tests/integration/test_bench_scripts.py runs too
$(BIN)/stream-dedup: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,bench]"
	touch $@

venv: $(BIN)/stream-dedup

# The whole suite against a real broker: the local one unless KAFKA_BOOTSTRAP names another.
test: venv
	@if [ -z "$$KAFKA_BOOTSTRAP" ]; then KAFKA_PORT=$(TEST_PORT) $(KAFKA) start --fresh; fi
	@status=0; \
	 KAFKA_BOOTSTRAP=$${KAFKA_BOOTSTRAP:-127.0.0.1:$(TEST_PORT)} $(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
	 if [ -z "$$KAFKA_BOOTSTRAP" ]; then KAFKA_PORT=$(TEST_PORT) $(KAFKA) stop; fi; \
	 exit $$status

# Unit tests of the pure core only: no broker.
test-unit: venv
	$(BIN)/python -m pytest -m "not kafka" tests/unit $(PYTEST_ARGS)

# The full pipeline on a sample the project ships, then a verdict summary.
demo: venv
	@bash deploy/demo.sh

broker-start:
	KAFKA_PORT=$(DEMO_PORT) $(KAFKA) start

broker-stop:
	KAFKA_PORT=$(DEMO_PORT) $(KAFKA) stop

clean:
	rm -rf $(VENV) .cache .state build *.egg-info
