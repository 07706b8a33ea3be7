#!/usr/bin/env bash
# GPU benchmarks of qkgeom, unattended, in one call of under 10 minutes.
#
#   bash bench/gpu.sh                 both sections below
#   bash bench/gpu.sh packing         packed trials only: tokens/s per variant and the paper grid's
#                                     projected wall time on one GPU (bench/gpu_packing.py)
#   bash bench/gpu.sh parts           the earlier parts only (bench/gpu_bench.py): Trainer vs reference,
#                                     eager vs compile, fp32 vs bf16, Ray trials sharing a GPU, probe cost
#   bash bench/gpu.sh --dry-run       check the set-up; says "no CUDA found" and exits 0 without a GPU
#
# Writes ${OUT:-bench/out}/packing/*.json (+ summary.json) and gpu_results.json.
# Needs a CUDA GPU with torch and Ray installed. The project is used from this checkout through
# PYTHONPATH; only if that import fails is `pip install -e .` tried. Every variant and part runs
# in its own process under `timeout`, is timed and printed, and is skipped with a line when it
# cannot run (no model.pack, no CUDA MPS, out of time); a failure is printed and the script goes
# on. Packing takes up to PACK_BUDGET_S (default 300 s), everything BUDGET_S (default 560 s).
# Environment: PYTHON (interpreter), OUT (results folder), BUDGET_S, PACK_BUDGET_S, SECONDS_PER_VARIANT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-bench/out}"
BUDGET_S="${BUDGET_S:-560}"
PACK_BUDGET_S="${PACK_BUDGET_S:-300}"
SECONDS_PER_VARIANT="${SECONDS_PER_VARIANT:-8}"
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"  # the Ray part starts its own throw-away local cluster
mkdir -p "$OUT/parts" "$OUT/packing"

DRY=0 SECTIONS="packing parts"
case "${1:-}" in
  --dry-run) DRY=1 ;;
  packing|parts) SECTIONS="$1" ;;
  "") ;;
  -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "usage: bash bench/gpu.sh [--dry-run | packing | parts]" >&2; exit 2 ;;
esac
echo "[gpu.sh] $(date -u +%FT%TZ) python: $PY; out: $OUT; budget ${BUDGET_S}s; sections: $SECTIONS"

if ! "$PY" -c "import torch, model.train, bench.gpu_bench" >/dev/null 2>&1; then
  if [ "$DRY" = 1 ]; then
    echo "[gpu.sh] dry run: 'import torch, model.train' fails with $PY:"
    "$PY" -c "import torch, model.train" 2>&1 | tail -1 || true
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
  "$PY" -m bench.gpu_bench --dry-run --out "$OUT"
  echo "[gpu.sh] packing variants: $("$PY" -m bench.gpu_packing --list | tr '\n' ' ')"
  exit 0
fi

if ! "$PY" -m bench.gpu_bench --check-cuda --out "$OUT"; then
  echo "[gpu.sh] no CUDA found: nothing measured"
  exit 1
fi

clip() {  # budget_seconds deadline -> the budget, clipped to the deadline (20 s kept for the summaries)
  local budget=$1 left=$(($2 - $(date +%s) - 20))
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  echo "$budget"
}

# ---- packed trials (issue 23) -------------------------------------------------------------------

MPS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/qkgeom-mps.XXXXXX")"
mps_stop() {
  CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" \
    bash "$ROOT/cluster/ray_node.sh" mps-stop || true
}
trap 'mps_stop; rm -rf "$MPS_DIR"' EXIT

variant() {  # name budget_seconds [env assignments for the process]
  local name=$1 budget rc=0 t0
  budget=$(clip "$2" "$PACK_DEADLINE"); shift 2
  if [ "$budget" -lt 20 ]; then
    echo "[gpu.sh] skip $name: out of time"
    echo "{\"variant\": \"$name\", \"status\": \"skipped: out of time\"}" > "$OUT/packing/$name.json"
    return 0
  fi
  t0=$(date +%s)
  echo "[gpu.sh] variant $name (timeout ${budget}s)"
  env "$@" timeout -k 15 "$budget" "$PY" -m bench.gpu_packing --variant "$name" --out "$OUT" \
    --seconds "$SECONDS_PER_VARIANT" || rc=$?
  echo "[gpu.sh] variant $name: rc $rc in $(( $(date +%s) - t0 ))s"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "{\"variant\": \"$name\", \"status\": \"timed out after ${budget}s\"}" > "$OUT/packing/$name.json"
  fi
}

packing() {
  PACK_DEADLINE=$(( $(date +%s) + PACK_BUDGET_S ))
  if [ "$PACK_DEADLINE" -gt "$DEADLINE" ]; then PACK_DEADLINE=$DEADLINE; fi
  rm -f "$OUT"/packing/*.json
  variant unpacked 60
  if "$PY" -c "import model.pack" >/dev/null 2>&1; then
    for k in 1 4 12 36; do variant "pack$k" 60; done
  else
    echo "[gpu.sh] skip pack1..pack36 and their compiled runs: model.pack is not importable here"
  fi
  variant procs4 90
  local mps_line
  mps_line=$(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" \
             bash "$ROOT/cluster/ray_node.sh" mps-start 2>&1 || true)
  echo "[gpu.sh] $mps_line"
  if grep -q "CUDA MPS started" <<<"$mps_line"; then
    variant procs4_mps 90 CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log"
    mps_stop
  else
    echo "[gpu.sh] skip procs4_mps: CUDA MPS could not be started here"
  fi
  variant unpacked_compile 120  # compiling takes ~30-60 s
  if "$PY" -c "import model.pack" >/dev/null 2>&1; then
    for k in 12 36 1 4; do variant "pack${k}_compile" 120; done
  fi
  "$PY" -m bench.gpu_packing --summary --out "$OUT" || echo "[gpu.sh] packing summary failed"
}

# ---- the earlier parts (bench/gpu_bench.py) -----------------------------------------------------

run_part() {  # name budget_seconds
  local name=$1 budget rc=0
  budget=$(clip "$2" "$DEADLINE")
  if [ "$budget" -lt 15 ]; then
    echo "[gpu.sh] skip $name: out of time"; echo skipped > "$OUT/parts/$name.rc"; return 0
  fi
  echo "[gpu.sh] part $name (timeout ${budget}s)"
  timeout -k 15 "$budget" "$PY" -m bench.gpu_bench --part "$name" --out "$OUT" --budget $((budget - 5)) || rc=$?
  echo "$rc" > "$OUT/parts/$name.rc"
  echo "[gpu.sh] part $name: rc $rc after $(( $(date +%s) - START ))s in all"
}

parts() {
  rm -f "$OUT"/parts/*.json "$OUT"/parts/*.rc
  run_part train_step 45
  run_part eager_vs_compile 120
  run_part fp32_vs_bf16 45
  run_part concurrent_trials 160
  run_part probe_cost 45
  "$PY" -m bench.gpu_bench --merge --out "$OUT" || echo "[gpu.sh] merge failed"
}

for section in $SECTIONS; do "$section"; done
echo "[gpu.sh] done in $(( $(date +%s) - START ))s: $OUT/packing/summary.json, $OUT/gpu_results.json"
