# pubguard: `make demo` runs the demo (see README), `make test` runs lint and the test suite.
# Both do all set-up on a fresh machine: Java 17+, a .venv with the package and its deps.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast fuzz lint java native setup clean

java:
	@bash scripts/ensure-java.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { bash scripts/ensure-python.sh $(PY) && $(PY) -m venv $(VENV); }
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The native fast path (native/, Rust): built when cargo exists; the Python backend otherwise.
native: $(STAMP)
	@bash scripts/build-native.sh $(BIN)

setup: java $(STAMP) native

demo: setup
	$(BIN)/pubguard demo

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy src

test: setup lint
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

fuzz: setup
	PUBGUARD_FUZZ_FRAMES=1000000 $(BIN)/python -m pytest -q tests/net -k fuzz
	@bash scripts/fuzz-native.sh

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis native/target src/pubguard/_native*.so
