#!/usr/bin/env bash
# The one GPU script of qkgeom (issue 27): one call of under 8 minutes on a bare GPU machine.
#
#   source .device/setup.sh && bash bench/gpu.sh    (.device/: ../shared/tools/device-bundle brings Ray)
#   bash bench/gpu.sh --dry-run                    check the set-up; without CUDA: "no CUDA found", exit 0
#   bash bench/gpu.sh SECTION...                   only these sections, in this order
#
# Sections, each in its own processes under `timeout`, each figure against unpacked eager measured in
# this same call:
#   throughput   unpacked eager and with CUDA graphs; packs of 12 and 36, eager and graphed; 4 processes;
#                a compiled pack of 36; run-steps/s, × unpacked eager, the paper grid's projected hours
#                (bench/gpu_packing.py)
#   probe        the per-epoch probe plus validation in training steps at depth 8 (bench/probe_cost.py)
#   equivalence  a pack against its unpacked runs, against the noise of switching attention backend,
#                fp32 and bf16 (bench/pack_equivalence.py)
#   sweep        the baseline sweep (paper width, depths 4 6 8, 2 seeds, 2 × 250 steps) with default
#                flags and with --pack 1: wall time, rows, values, each run's first step (bench/gpu_sweep.py)
# then the table of every figure (bench/gpu_bench.py --report) in ${OUT:-bench/out}/gpu_results.json.
# Environment: PYTHON (interpreter), OUT (results folder), BUDGET_S (default 470), SECONDS_PER_VARIANT (5).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-bench/out}"
BUDGET_S="${BUDGET_S:-470}"
SECONDS_PER_VARIANT="${SECONDS_PER_VARIANT:-5}"
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"  # the sweep starts its own throw-away local cluster
mkdir -p "$OUT/packing"

DRY=0 SECTIONS="throughput probe equivalence sweep"
case "${1:-}" in
  --dry-run) DRY=1 ;;
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  "") ;;
  *) for s in "$@"; do
       case "$s" in throughput|probe|equivalence|sweep) ;;
         *) echo "bash bench/gpu.sh: unknown section '$s'; choose from: throughput probe equivalence sweep" >&2; exit 2 ;;
       esac
     done
     SECTIONS="$*" ;;
esac
echo "[gpu.sh] $(date -u +%FT%TZ) python: $PY; out: $OUT; budget ${BUDGET_S}s; sections: $SECTIONS"

if ! "$PY" -c "import torch, model.train, bench.gpu_bench" >/dev/null 2>&1; then
  echo "[gpu.sh] 'import torch, model.train' fails with $PY:"
  "$PY" -c "import torch, model.train" 2>&1 | tail -1 || true
  if [ "$DRY" = 1 ] && ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[gpu.sh] no CUDA found (torch is not importable): nothing measured"
    exit 0
  fi
  [ "$DRY" = 1 ] || exit 1
fi

if [ "$DRY" = 1 ]; then
  "$PY" -m bench.gpu_bench --dry-run --out "$OUT"
  echo "[gpu.sh] throughput variants: $("$PY" -m bench.gpu_packing --list | tr '\n' ' ')"
  "$PY" -c "import ray" >/dev/null 2>&1 || echo "[gpu.sh] no Ray here: the sweep section would be skipped (../shared/tools/device-bundle)"
  exit 0
fi

if ! "$PY" -m bench.gpu_bench --check-cuda --out "$OUT"; then
  echo "[gpu.sh] no CUDA found: nothing measured"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || true

clip() {  # budget_seconds deadline -> the budget, clipped to the deadline (15 s kept for the report)
  local budget=$1 left=$(($2 - $(date +%s) - 15))
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  echo "$budget"
}

timed() {  # name budget command... : run under timeout, say how it ended
  local name=$1 budget rc=0 t0
  budget=$(clip "$2" "$SECTION_DEADLINE"); shift 2
  if [ "$budget" -lt 20 ]; then echo "[gpu.sh] skip $name: out of time"; return 0; fi
  t0=$(date +%s)
  echo "[gpu.sh] $name (timeout ${budget}s)"
  timeout -k 10 "$budget" "$@" || rc=$?
  echo "[gpu.sh] $name: rc $rc in $(( $(date +%s) - t0 ))s ($(( $(date +%s) - START ))s in all)"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "{\"status\": \"timed out after ${budget}s\"}" > "$OUT/$name.timeout.json"; fi
}

section_budget() { "$PY" -c "from bench.gpu_bench import SECTIONS; print(SECTIONS['$1'])"; }

throughput() {
  rm -f "$OUT"/packing/*.json
  for v in unpacked unpacked_graphs pack12 pack12_graphs pack36 pack36_graphs procs4; do
    timed "$v" 60 "$PY" -m bench.gpu_packing --variant "$v" --out "$OUT" --seconds "$SECONDS_PER_VARIANT"
  done
  timed pack36_graphs_compile 90 "$PY" -m bench.gpu_packing --variant pack36_graphs_compile --out "$OUT" \
    --seconds "$SECONDS_PER_VARIANT"
}

probe() {
  timed probe 60 "$PY" -m bench.probe_cost --device cuda --depths 8 --rounds 3 --steps 20 --threads 0 \
    --json "$OUT/probe.json"
}

equivalence() {
  for amp in off bf16; do
    timed "equivalence-$amp" 45 "$PY" -m bench.pack_equivalence --device cuda --size paper --k 6 --depth 4 \
      --steps 20 --amp "$amp" --json "$OUT/equivalence-$amp.json"
  done
}

sweep() {
  if ! "$PY" -c "import ray" >/dev/null 2>&1; then
    echo "[gpu.sh] skip sweep: Ray is not importable (source .device/setup.sh; ../shared/tools/device-bundle)"
    return 0
  fi
  local budget
  budget=$(clip "$(section_budget sweep)" "$DEADLINE")
  timed sweep "$budget" "$PY" -m bench.gpu_sweep --out "$OUT" --timeout $(( (budget - 10) / 2 ))
}

for section in $SECTIONS; do
  SECTION_DEADLINE=$(( $(date +%s) + $(section_budget "$section") ))
  if [ "$SECTION_DEADLINE" -gt "$DEADLINE" ]; then SECTION_DEADLINE=$DEADLINE; fi
  "$section"
done
SECTION_DEADLINE=$DEADLINE
"$PY" -m bench.gpu_bench --report --out "$OUT" || echo "[gpu.sh] report failed"
echo "[gpu.sh] done in $(( $(date +%s) - START ))s: $OUT/gpu_results.json"
