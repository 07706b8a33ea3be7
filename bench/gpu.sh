#!/usr/bin/env bash
# GPU benchmarks of qkgeom, unattended, in under 8 minutes; one JSON of results.
#
#   bash bench/gpu.sh             measure; writes ${OUT:-bench/out}/gpu_results.json
#   bash bench/gpu.sh --dry-run   check the set-up; says "no CUDA found" and exits 0 without a GPU
#
# Needs a CUDA GPU with torch and Ray installed. The project is used from this
# checkout through PYTHONPATH; only if that import fails is `pip install -e .`
# tried. Each part (see bench/gpu_bench.py) runs in its own process under
# `timeout` with its own budget, clipped so the whole script stays within
# BUDGET_S (default 450 s); a part that runs out keeps what it finished.
# Environment: PYTHON (interpreter), OUT (results folder), BUDGET_S.
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-bench/out}"
BUDGET_S="${BUDGET_S:-450}"
START=$(date +%s)

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"  # the Ray part starts its own throw-away local cluster
mkdir -p "$OUT/parts"
echo "[gpu.sh] $(date -u +%FT%TZ) python: $PY; out: $OUT; budget ${BUDGET_S}s"

DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "usage: bash bench/gpu.sh [--dry-run]" >&2; exit 2 ;;
esac

if ! "$PY" -c "import torch, model.train, bench.gpu_bench" >/dev/null 2>&1; then
  if [ "$DRY" = 1 ]; then
    echo "[gpu.sh] dry run: 'import torch, model.train' fails with $PY:"
    "$PY" -c "import torch, model.train" 2>&1 | tail -1
    if ! "$PY" -c "import torch" >/dev/null 2>&1; then
      echo "[gpu.sh] no CUDA found (torch is not importable): nothing measured"
      exit 0
    fi
    echo "[gpu.sh] a real run would try: $PY -m pip install -e ."
  else
    echo "[gpu.sh] project not importable; trying: $PY -m pip install -q -e ."
    timeout 120 "$PY" -m pip install -q -e . || echo "[gpu.sh] pip install failed; continuing with PYTHONPATH"
  fi
fi

if [ "$DRY" = 1 ]; then
  exec "$PY" -m bench.gpu_bench --dry-run --out "$OUT"
fi

"$PY" -m bench.gpu_bench --check-cuda --out "$OUT" || { echo "[gpu.sh] no CUDA found: nothing measured"; exit 1; }
rm -f "$OUT"/parts/*.json "$OUT"/parts/*.rc

DEADLINE=$((START + BUDGET_S))
run_part() {  # name budget_seconds
  local name=$1 budget=$2 left
  left=$((DEADLINE - $(date +%s) - 20))  # keep 20 s for the merge
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  if [ "$budget" -lt 15 ]; then
    echo "[gpu.sh] skip $name: out of time"; echo skipped > "$OUT/parts/$name.rc"; return
  fi
  echo "[gpu.sh] part $name (timeout ${budget}s)"
  timeout -k 15 "$budget" "$PY" -m bench.gpu_bench --part "$name" --out "$OUT" --budget $((budget - 5))
  local rc=$?
  echo "$rc" > "$OUT/parts/$name.rc"
  echo "[gpu.sh] part $name: rc $rc after $(( $(date +%s) - START ))s in all"
}

run_part train_step 45
run_part eager_vs_compile 120
run_part fp32_vs_bf16 45
run_part concurrent_trials 160
run_part probe_cost 45

"$PY" -m bench.gpu_bench --merge --out "$OUT"
echo "[gpu.sh] done in $(( $(date +%s) - START ))s: $OUT/gpu_results.json"
