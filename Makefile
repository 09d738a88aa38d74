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
# The tiers. `make test` leaves out the soak, the benchmark-script runs and the further variants of
# scenarios it covers (make soak, make bench-smoke, make test-long), runs the fault tests on 4,000
# events (STREAM_DEDUP_TEST_FAULT_EVENTS=20000 for the full size), and runs the unit tests beside
# the broker tests, which mostly wait on the broker.
TEST_MARKS ?= not soak and not bench and not long
export STREAM_DEDUP_TEST_FAULT_EVENTS ?= 4000

.PHONY: venv lock test test-long test-unit soak bench-smoke check demo broker-start broker-stop clean

# Every package from the lock file (exact versions and hashes), then the project itself, editable.
$(BIN)/stream-dedup: requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

venv: $(BIN)/stream-dedup

# Re-resolve requirements.lock from pyproject.toml (run after changing a dependency; commit both).
lock: venv
	$(BIN)/uv pip compile pyproject.toml --extra test --extra bench --generate-hashes \
	  --python-version 3.11 -q -o requirements.lock

# The suite against a real broker: the local one unless KAFKA_BOOTSTRAP names another. The unit
# tests run beside the broker tests; both must pass.
test: venv
	@unit_log=$$(mktemp); \
	 $(BIN)/python -m pytest -m "($(TEST_MARKS)) and not kafka" tests/unit $(PYTEST_ARGS) >$$unit_log 2>&1 & unit=$$!; \
	 status=0; $(MAKE) --no-print-directory _pytest MARKS="$(TEST_MARKS)" PYTEST_PATHS=tests/integration || status=$$?; \
	 wait $$unit || status=$$?; echo "--- unit tests"; cat $$unit_log; rm -f $$unit_log; exit $$status

# Every variant of every scenario, the fault tests at full size (about an hour).
test-long: venv
	@STREAM_DEDUP_TEST_FAULT_EVENTS=20000 $(MAKE) --no-print-directory _pytest MARKS="not soak and not bench"

# The bounded steady-rate soak (about 10 minutes; STREAM_DEDUP_TEST_SOAK_S shortens it).
soak: venv
	@$(MAKE) --no-print-directory _pytest MARKS="soak"

# Every benchmark script of bench/README.md, each on a small input (about 3 minutes).
bench-smoke: venv
	@$(MAKE) --no-print-directory _pytest MARKS="bench"

_pytest:
	@if [ -z "$$KAFKA_BOOTSTRAP" ]; then KAFKA_PORT=$(TEST_PORT) $(KAFKA) start --fresh; fi
	@status=0; \
	 KAFKA_BOOTSTRAP=$${KAFKA_BOOTSTRAP:-127.0.0.1:$(TEST_PORT)} $(BIN)/python -m pytest -m "$(MARKS)" $(PYTEST_ARGS) $(PYTEST_PATHS) || status=$$?; \
	 if [ -z "$$KAFKA_BOOTSTRAP" ]; then KAFKA_PORT=$(TEST_PORT) $(KAFKA) stop; fi; \
	 exit $$status

# Unit tests of the pure core only: no broker.
test-unit: venv
	$(BIN)/python -m pytest -m "not kafka and not bench" tests/unit $(PYTEST_ARGS)

# Lint and types.
check: venv
	$(BIN)/ruff check stream_dedup tests bench
	$(BIN)/mypy

# The full pipeline on a sample the project ships, then a verdict summary.
demo: venv
	@bash deploy/demo.sh

broker-start:
	KAFKA_PORT=$(DEMO_PORT) $(KAFKA) start

broker-stop:
	KAFKA_PORT=$(DEMO_PORT) $(KAFKA) stop

clean:
	rm -rf $(VENV) .cache .state build *.egg-info
