# Two commands for a fresh clone: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test lint bench venv clean cluster-test

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
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
