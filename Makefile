# The two commands a newcomer needs (see README):
#   make run    set up .venv and run the main job, configs/phase1.yaml
#   make test   set up .venv and run ruff, mypy and the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= configs/phase1.yaml
# Three test processes on this project's 2-core machines: the suite waits on Ray,
# subprocesses and servers, and two left the cores a fifth idle. A fresh clone's
# make test (2026-11-27): 7 min 30 s, 7 min 58 s and 8 min 23 s with three; 8 min
# 10 s, 8 min 25 s and 8 min 29 s with two. Three again that evening, with setup's
# compiling beside pip and a leaner Ray: 8 min 5 s, 8 min 17 s and 8 min 24 s.
# (Three once made the tests that train slower than they gained, 14 min in CI,
# before the suite shared its Ray.) make test
# hands tests out one at a time, longest first (below); make check lets an idle
# worker take tests still queued for another (worksteal).
TEST_WORKERS ?= 3

.PHONY: setup bytecode run debug test durations check lint ui docs clean gpu-kit gpu-calibrate

setup: $(VENV)/.installed

# The project's own modules, byte-compiled too: installed editable, they are not in
# $(VENV)/lib, and where PYTHONDONTWRITEBYTECODE is set every process that imports
# them (each search's driver, each Ray worker: about 300 over make test) compiled
# them again from source. compileall skips what is current: 0.7 s on a fresh clone.
bytecode: setup
	$(BIN)/python -m compileall -q -j 0 hpsearch tests scripts examples > /dev/null

# torch goes in first, pinned to the CPU build this project is tested with,
# and only where no torch is present: the package's own range (torch>=2.4)
# is then already satisfied, so pip never downloads the CUDA wheels.
# pip byte-compiles every installed file on one core (most of the install on
# 2 cores); compileall does the same on every core. The .pyc files have to be
# there: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines)
# nothing else writes them, and every process would compile what it imports.
# Packages' own test suites and the parts of Ray no search imports (RLlib, Serve,
# its LLM library) are left out: a fifth of the files, none of them ever imported.
# (A file no Python 3.11 can compile, in some package's tests, is skipped, as pip
# skips it.) pip installs on one core: torch and its dependencies, there first (a
# third of the sources), compile on the other meanwhile; the second pass compiles
# the rest and skips what is current (a file pip was still writing is done again).
NOT_COMPILED := /tests?/|/ray/(rllib|llm|serve)/
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet --no-compile torch==2.13.0
	$(BIN)/python -m compileall -q -j 1 -x '$(NOT_COMPILED)' $(VENV)/lib > /dev/null 2>&1 & early=$$!; \
	$(BIN)/python -m pip install --quiet --no-compile -e ".[dev]"; installed=$$?; \
	wait $$early; test $$installed -eq 0
	$(BIN)/python -m compileall -q -j 0 -x '$(NOT_COMPILED)' $(VENV)/lib > /dev/null || true
	touch $@

run: bytecode
	$(BIN)/hpsearch run $(CONFIG)

# The documentation site, served on http://127.0.0.1:8000 (make test builds it strict).
# docs/hooks.py generates its references and reads every benchmark figure from
# benchmarks/results/ as it builds: a re-run benchmark shows without an edit.
docs: setup
	$(BIN)/mkdocs serve

debug: bytecode
	$(BIN)/hpsearch run configs/debug.yaml

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# mypy (about 40 s of one core from cold) checks beside the tests, which mostly
# wait on Ray and subprocesses; the target fails if either does. The 30 slowest
# tests are listed at the end: where the suite's time goes, in every CI log.
# The tests go out one at a time, the longest first (tests/schedule.py), so that
# the workers' last tests are short ones.
PYTEST_ORDERED := -n $(TEST_WORKERS) --dist load --maxschedchunk 1
test: bytecode
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy & types=$$!; \
	$(BIN)/python -m pytest -ra $(PYTEST_ORDERED) --durations=30; tests=$$?; \
	wait $$types; typed=$$?; \
	test $$tests -eq 0 -a $$typed -eq 0

# Record each test's seconds (tests/durations.json, the order make test hands
# them out in) from a full run in which every test passed.
durations: bytecode
	$(BIN)/python -m pytest -q $(PYTEST_ORDERED) --record-durations

# The edit loop's lane: ruff, and the tests that start no process (no Ray, no
# subprocess, no server; one that does fails, naming the marker it lacks).
# make test, which CI runs, runs every test. These tests wait on nothing, so one
# worker per core: on 2 cores (2026-11-29), 87 s and 90 s with two, 95-113 s with three.
CHECK_WORKERS ?= logical
check: bytecode
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -n $(CHECK_WORKERS) --dist worksteal --no-processes

# The GPU kit (DEVELOPERS.md, "The GPU machine"): what the lent GPU machine's image
# lacks, for Python 3.12, as one payload of at most 55 MB, .gpu/kit.tar.xz (ignored
# by git); then the test that checks its size and that the stack imports from it
# (the kit's own lane, -m kit: it builds a second kit, for this Python, to import).
gpu-kit: setup
	$(BIN)/python scripts/gpu_kit.py
	$(BIN)/python -m pytest -q -m kit -p no:cacheprovider tests/scripts/test_gpu_kit.py

# The sharing model's constants from a GPU run: make gpu-calibrate RESULTS=<sharing-*.json>
gpu-calibrate: setup
	@test -n "$(RESULTS)" || { echo "make gpu-calibrate RESULTS=benchmarks/results/sharing-<date>-<gpu>.json" >&2; exit 2; }
	$(BIN)/python scripts/gpu_calibrate.py $(RESULTS)

ui: setup
	$(BIN)/hpsearch ui

clean:
	rm -rf mlruns .pytest_cache .mypy_cache .ruff_cache
