#!/usr/bin/env bash
# The one GPU script of qkgeom: one call on a bare GPU machine, every budget derived.
#
#   source .device/setup.sh && bash bench/gpu.sh    (.device/: ../shared/tools/device-bundle brings Ray)
#   bash bench/gpu.sh --dry-run                    the plan and the set-up; without CUDA: "no CUDA found", exit 0
#   bash bench/gpu.sh SECTION...                   only these sections, in this order (throughput: < 4 min)
#
# First, inside the same budget: `pytest -m gpu` (tests/test_model_graphs_cuda.py: recorded CUDA-graph
# steps against eager ones for every condition, packed and not, fp32 and bf16; the AMP choice on this
# GPU), under `timeout ${GPU_TESTS_S:-120}`; a failure is reported and the script's exit status is 1
# after the sections ran. Then the sections, each item its own process under `timeout`, each figure
# against unpacked eager measured in this same call:
#   throughput   unpacked eager / graphed / k_spectrum_clamp; packs of 12 (eager, graphed, clamp) and 36;
#                4 processes; GPU busy (its own process); a compiled pack of 36 only with time left
#                (bench/gpu_packing.py)
#   clamp        k_spectrum_clamp's decomposition: eigh / svd / refine on the GPU and on the CPU, unpacked
#                and a pack of 12, as × the none step (bench/clamp_cost.py)
#   probe        the per-epoch probe plus validation in training steps at depth 8 (bench/probe_cost.py)
#   equivalence  a pack against its unpacked runs, against the noise of switching attention backend,
#                fp32 and bf16 (bench/pack_equivalence.py)
#   sweep        the baseline sweep twice, default flags and --pack 1, only with its need left
#                (bench/gpu_sweep.py; on its own: bash bench/gpu.sh sweep)
# Budgets: bench/gpu_plan.py (printed first: ops per step counted here, the GPU's costs guessed); each
# item's time and how it ended go to $OUT/timings.jsonl; then the table of every figure, with each
# section's budget and actual seconds (bench/gpu_bench.py --report) in ${OUT:-bench/out}/gpu_results.json.
# Environment: PYTHON (interpreter), OUT (results folder), BUDGET_S (default: the sections' budgets,
# at most 470), GPU_TESTS_S (120: the GPU tests' share of it), SECONDS_PER_VARIANT (3), CPU_CHECK=1 (every section at a tiny size on the CPU: a check
# of this script, measuring nothing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-bench/out}"
SECONDS_PER_VARIANT="${SECONDS_PER_VARIANT:-3}"
DEV=cuda TINY=()
if [ "${CPU_CHECK:-0}" = 1 ]; then DEV=cpu TINY=(--tiny); fi
START=$(date +%s)
ALL="throughput clamp probe equivalence sweep"

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"  # the sweep starts its own throw-away local cluster
mkdir -p "$OUT/packing"

DRY=0 SECTIONS="$ALL"
case "${1:-}" in
  --dry-run) DRY=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 0 ;;
  "") ;;
  *) for s in "$@"; do
       case " $ALL " in *" $s "*) ;;
         *) echo "bash bench/gpu.sh: unknown section '$s'; choose from: $ALL" >&2; exit 2 ;;
       esac
     done
     SECTIONS="$*" ;;
esac

if ! "$PY" -c "import torch, model.trainer, bench.gpu_bench" >/dev/null 2>&1; then
  echo "[gpu.sh] 'import torch, model.trainer' fails with $PY:"
  "$PY" -c "import torch, model.trainer" 2>&1 | tail -1 || true
  if [ "$DRY" = 1 ] && ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[gpu.sh] no CUDA found (torch is not importable): nothing measured"
    exit 0
  fi
  [ "$DRY" = 1 ] || exit 1
fi

# the plan: every item's budget, from what it runs (bench/gpu_plan.py)
PLAN_OUT=$("$PY" -m bench.gpu_plan --out "$OUT" --seconds "$SECONDS_PER_VARIANT" --budget-of "$SECTIONS")
echo "$PLAN_OUT" | grep -v '^BUDGET '
BUDGET_S="${BUDGET_S:-$(echo "$PLAN_OUT" | sed -n 's/^BUDGET //p')}"
DEADLINE=$((START + BUDGET_S))
echo "[gpu.sh] $(date -u +%FT%TZ) python: $PY; out: $OUT; budget ${BUDGET_S}s; sections: $SECTIONS"

GPU_TESTS_S="${GPU_TESTS_S:-120}"
if [ "$DRY" = 1 ]; then
  echo "[gpu.sh] first: $PY -m pytest -m gpu tests/test_model_graphs_cuda.py (timeout ${GPU_TESTS_S}s)"
  "$PY" -m bench.gpu_bench --dry-run --out "$OUT"
  echo "[gpu.sh] throughput groups: $("$PY" -m bench.gpu_packing --list | tr '\n' ';')"
  "$PY" -c "import ray" >/dev/null 2>&1 || echo "[gpu.sh] no Ray here: the sweep section would be skipped (../shared/tools/device-bundle)"
  exit 0
fi

if [ "$DEV" = cpu ]; then
  echo "[gpu.sh] CPU_CHECK=1: every section at a tiny size on the CPU, a check of this script: nothing measured"
elif ! "$PY" -m bench.gpu_bench --check-cuda --out "$OUT"; then
  echo "[gpu.sh] no CUDA found: nothing measured"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || true
: > "$OUT/timings.jsonl"

# the GPU tests first (skipped without CUDA, as in CPU_CHECK=1): the recorded step proven before it is timed
GPU_TESTS_RC=0 T0=$(date +%s)
echo "[gpu.sh] gpu-tests (timeout ${GPU_TESTS_S}s): pytest -m gpu"
timeout -k 10 "$GPU_TESTS_S" "$PY" -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/test_model_graphs_cuda.py \
  2>&1 | tee "$OUT/gpu_tests.log" | grep -E '^\[gpu tests\]|passed|failed|skipped|error|FAILED|CUDA graphs off' || true
GPU_TESTS_RC=${PIPESTATUS[0]}
GPU_TESTS_STATUS=ok
if [ "$GPU_TESTS_RC" = 124 ] || [ "$GPU_TESTS_RC" = 137 ]; then GPU_TESTS_STATUS="timed out after ${GPU_TESTS_S}s"
elif [ "$GPU_TESTS_RC" != 0 ]; then GPU_TESTS_STATUS="rc $GPU_TESTS_RC (see $OUT/gpu_tests.log)"; fi
echo "[gpu.sh] gpu-tests: $GPU_TESTS_STATUS in $(( $(date +%s) - T0 ))s"
printf '{"item": "gpu-tests", "section": "gpu-tests", "budget_s": %s, "ran_s": %s, "rc": %s, "status": "%s"}\n' \
  "$GPU_TESTS_S" "$(( $(date +%s) - T0 ))" "$GPU_TESTS_RC" "$GPU_TESTS_STATUS" >> "$OUT/timings.jsonl"

plan() {  # plan ITEM FIELD: a field of the plan's item (no torch import)
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]][sys.argv[4]])" \
    "$OUT/plan.json" items "$1" "$2"
}
items_of() { "$PY" -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))['order'][sys.argv[2]]))" "$OUT/plan.json" "$1"; }
section_budget() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['sections'].get(sys.argv[2], 0))" "$OUT/plan.json" "$1"; }
reserved_after() {  # the budgets of the sections after this one, non-optional items only
  local after=0 seen=0 s
  for s in $SECTIONS; do
    if [ "$seen" = 1 ]; then
      after=$((after + $(section_budget "$s")))
    fi
    [ "$s" = "$1" ] && seen=1
  done
  echo "$after"
}
log() {  # log ITEM SECTION BUDGET RAN RC STATUS
  printf '{"item": "%s", "section": "%s", "budget_s": %s, "ran_s": %s, "rc": %s, "status": "%s"}\n' "$@" >> "$OUT/timings.jsonl"
}

timed() {  # timed ITEM SECTION command... : under timeout, with the item's budget clipped to what is left
  local item=$1 section=$2 budget need left rc=0 t0 status=ok
  shift 2
  budget=$(plan "$item" budget_s); need=$(plan "$item" need_s); need=${need%.*}
  left=$((DEADLINE - $(date +%s) - RESERVED - 10))
  if [ "$(plan "$item" optional)" = True ] && [ "$left" -lt "$need" ]; then
    local again=$(( $(section_budget "$section") + 15 + budget ))
    echo "[gpu.sh] skip $item: it needs about ${need}s, ${left}s left in this call (to run it: BUDGET_S=$again bash bench/gpu.sh $section)"
    log "$item" "$section" "$budget" 0 null "skipped: needs ${need}s, ${left}s left"
    return 0
  fi
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  if [ "$budget" -lt 20 ]; then
    echo "[gpu.sh] skip $item: out of time (${left}s left)"
    log "$item" "$section" "$(plan "$item" budget_s)" 0 null "skipped: out of time"
    return 0
  fi
  t0=$(date +%s)
  echo "[gpu.sh] $item (timeout ${budget}s, planned $(plan "$item" budget_s)s)"
  timeout -k 10 "$budget" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="timed out after ${budget}s"; elif [ "$rc" != 0 ]; then status="rc $rc"; fi
  echo "[gpu.sh] $item: $status in $(( $(date +%s) - t0 ))s ($(( $(date +%s) - START ))s in all)"
  log "$item" "$section" "$budget" "$(( $(date +%s) - t0 ))" "$rc" "$status"
}

throughput() {
  rm -f "$OUT"/packing/*.json
  local g
  for g in $(items_of throughput); do
    timed "$g" throughput "$PY" -m bench.gpu_packing --group "$g" --out "$OUT" --seconds "$SECONDS_PER_VARIANT" \
      --device "$DEV" "${TINY[@]}"
  done
}

clamp() {
  local shape=(--depths 8 --members 1,12); [ "$DEV" = cpu ] && shape=(--depths 2 --members 1,3 --tiny)
  timed clamp clamp "$PY" -m bench.clamp_cost --device "$DEV" "${shape[@]}" --steps 5 --rounds 3 --threads 0 \
    --json "$OUT/clamp.json"
}

probe() {
  timed probe probe "$PY" -m bench.probe_cost --device "$DEV" "${TINY[@]}" --depths 8 --rounds 3 --steps 20 --threads 0 \
    --json "$OUT/probe.json"
}

equivalence() {
  local amp shape=(--size paper --members 3 --depth 4 --steps 20)
  [ "$DEV" = cpu ] && shape=(--size tiny --members 2 --depth 1 --steps 2)
  for amp in off bf16; do
    timed "equivalence-$amp" equivalence "$PY" -m bench.pack_equivalence --device "$DEV" "${shape[@]}" \
      --amp "$amp" --json "$OUT/equivalence-$amp.json"
  done
}

sweep() {
  if ! "$PY" -c "import ray" >/dev/null 2>&1; then
    echo "[gpu.sh] skip sweep: Ray is not importable (source .device/setup.sh; ../shared/tools/device-bundle)"
    log sweep sweep "$(plan sweep budget_s)" 0 null "skipped: no Ray"
    return 0
  fi
  local left=$((DEADLINE - $(date +%s) - 10)) budget
  budget=$(plan sweep budget_s); if [ "$left" -lt "$budget" ]; then budget=$left; fi
  timed sweep sweep "$PY" -m bench.gpu_sweep --out "$OUT" --timeout $(( (budget - 10) / 2 )) "${TINY[@]}"
}

for section in $SECTIONS; do
  RESERVED=$(reserved_after "$section")
  "$section"
done
"$PY" -m bench.gpu_bench --report --out "$OUT" || echo "[gpu.sh] report failed"
echo "[gpu.sh] done in $(( $(date +%s) - START ))s: $OUT/gpu_results.json"
if [ "$GPU_TESTS_RC" != 0 ]; then
  echo "[gpu.sh] the GPU tests did not pass ($GPU_TESTS_STATUS): the figures above were measured anyway"
  exit 1
fi
