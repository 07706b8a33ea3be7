# Two commands for a fresh clone: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_EXTRAS := hf,tb

.PHONY: demo test lint bench venv clean cluster-test

# `make demo` installs what the demo runs (the project, the checkpoint probe, TensorBoard);
# `make test` adds the test tools (pytest, moto, boto3, ruff): ~25 s less for a first demo.
# The test install includes the demo's, so it marks both.
venv: $(STAMP)

define install
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[$(1)]'
endef

$(STAMP): pyproject.toml
	$(call install,dev)
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	$(call install,$(DEMO_EXTRAS))
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m sweep.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

# End to end on this Debian machine (root, apt-get; not part of `make test`): installs sshd,
# SLURM and munge, then `ray up cluster.local.yaml` over SSH and slurm/qkgeom.sbatch. < 10 min.
cluster-test:
	bash tests/cluster/run.sh

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf runs .pytest_cache
