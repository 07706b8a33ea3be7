# Two commands for a fresh clone: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_EXTRAS := hf,tb

.PHONY: demo demo-paper test test-floors lint bench venv clean cluster-test lock

# `make demo` installs what the demo runs (the project, the checkpoint probe, TensorBoard);
# `make test` adds the test tools (pytest, moto, boto3, ruff): ~25 s less for a first demo.
# The test install includes the demo's, so it marks both.
venv: $(STAMP)

LOCK    := requirements.lock

# Every install takes its versions from $(LOCK), the one lock of tested versions that CI and
# every cluster node (cluster/ray_node.sh) use too: a new upstream release changes nothing here.
define install
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(LOCK) torch
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[$(1)]'
endef

$(STAMP): pyproject.toml $(LOCK)
	$(call install,dev)
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml $(LOCK)
	$(call install,$(DEMO_EXTRAS))
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m sweep.demo

# The paper's depths 4/6/8 (interventions: 8 layers) at the demo width, on every core; it prints
# how long it expects to take on this machine before it trains.
demo-paper: $(DEMO_STAMP)
	$(BIN)/python -m sweep.demo --paper-depths

# Two pytest-xdist workers, a test file to a worker (its module fixtures built once); each worker's Ray
# sessions live in a temp folder of its own (tests/conftest.py). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

# Then the tests that compare with numbers stored in a file once more, on PyTorch's portable kernels
# (another rounding path on this CPU, as a user's CPU has its own): a bit-for-bit assumption fails here
# too, not only on another machine (docs/architecture.md, "Stored references"). Only the files that
# mark a test `stored` are collected (collecting every file imports Ray, transformers, …: ~20 s).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -q -p no:cacheprovider -m stored $$(grep -l "mark.stored" tests/test_*.py)

# The fast tests on pyproject's lower bounds (requirements-floors.txt), in a throw-away venv; not in CI.
# FLOORS_TESTS narrows what runs (default: every test that starts no Ray).
FLOORS_TESTS ?= -m "not ray"
test-floors:
	rm -rf .floors-venv && $(PY) -m venv .floors-venv
	.floors-venv/bin/pip install --quiet --upgrade pip
	.floors-venv/bin/pip install --quiet -c requirements-floors.txt torch
	.floors-venv/bin/pip install --quiet -c requirements-floors.txt -e '.[dev]'
	.floors-venv/bin/pip freeze | grep -iE '^(torch|numpy|scipy|pandas|pyarrow|ray|matplotlib|tqdm|tabulate)=='
	.floors-venv/bin/python -m pytest -q $(FLOORS_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .

# End to end on this Debian machine (root, apt-get; not part of `make test`): installs sshd,
# SLURM and munge, then `ray up cluster.local.yaml` over SSH and slurm/qkgeom.sbatch. < 10 min.
cluster-test:
	bash tests/cluster/run.sh

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

# Regenerate $(LOCK) after changing pyproject.toml's dependencies: a fresh venv from the open
# ranges (every extra), frozen. Review the diff, then `make test` and commit both files.
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet torch==2.13.0
	.lock-venv/bin/pip install --quiet -e '.[dev]'
	{ sed -n '/^#/p' $(LOCK); .lock-venv/bin/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -rf .lock-venv

clean:
	rm -rf runs .pytest_cache
