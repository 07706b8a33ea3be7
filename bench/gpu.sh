#!/usr/bin/env bash
# The one GPU script of qkgeom: one call on a bare GPU machine, every budget derived.
#
#   source .device/setup.sh && bash bench/gpu.sh    (.device/: ../shared/tools/device-bundle brings Ray)
#   bash bench/gpu.sh --dry-run                    the plan and the set-up; without CUDA: "no CUDA found", exit 0
#   bash bench/gpu.sh SECTION...                   only these sections, in this order (throughput: about 4 min)
#
# Sections, in this order (a call with none named runs those that fit in its budget, BUDGET_S, and names
# the rest for a second call; named ones run as named):
#   tests        `pytest -m gpu` ($GPU_TESTS, default tests/test_model_graphs_cuda.py: recorded CUDA-graph
#                steps against eager ones for every condition, packed and not, fp32 and bf16; a forced fp16
#                overflow through the masked AdamW step; the validation graph after more replayed steps;
#                resume and re-recording; TF32 on; --compile; the AMP choice), under `timeout`, its budget
#                counted from the tests pytest collects. A failure or a timeout is printed as "failed" /
#                "timed out", the sections still run, and the script exits 1
#   clamp        k_spectrum_clamp's decomposition: eigh / svd / refine on the GPU and on the CPU, unpacked
#                and a pack of 12, as × the none step (bench/clamp_cost.py); its clamped-step factor is
#                what the sweep's plan prices a clamp trial by ($OUT/costs.json: copy it to sweep/costs.json)
#   throughput   unpacked eager / graphed / k_spectrum_clamp; packs of 12 (eager, graphed, clamp) and 36;
#                4 processes; GPU busy (its own process); a compiled pack of 36 only with time left; each
#                variant's peak memory beside the plan's memory model (bench/gpu_packing.py)
#   probe        the per-epoch probe plus validation in training steps at depth 8 (bench/probe_cost.py)
#   equivalence  a pack against its unpacked runs, against the noise of switching attention backend,
#                fp32 and bf16 (bench/pack_equivalence.py)
#   sweep        the baseline sweep twice, default flags and --pack 1, only with its need left
#                (bench/gpu_sweep.py; on its own: bash bench/gpu.sh sweep)
# Prerequisites, checked first in one line: torch, pytest, pytest-timeout (pyproject's --timeout) and the
# project importable. Budgets: bench/gpu_plan.py (printed first: ops per step counted here, GPU tests
# counted, the GPU's costs guessed); each item's time and how it ended go to $OUT/timings.jsonl; then the
# table of every figure, with each section's budget and actual seconds (bench/gpu_bench.py --report) in
# ${OUT:-bench/out}/gpu_results.json. Exit status: 0 when every test and item that ran passed, 1 when a
# test or an item failed or timed out (each said so in its line), 2 for a bad argument.
# Environment: PYTHON (interpreter), OUT (results folder), BUDGET_S (default: the sections' budgets,
# at most 470), GPU_TESTS (test files), GPU_TESTS_S (the tests' timeout; default: their planned budget),
# SECONDS_PER_VARIANT (3), CPU_CHECK=1 (every section at a tiny size on the CPU: a check of this script,
# measuring nothing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-bench/out}"
SECONDS_PER_VARIANT="${SECONDS_PER_VARIANT:-3}"
DEV=cuda TINY=() COUNT=()
if [ "${CPU_CHECK:-0}" = 1 ]; then DEV=cpu TINY=(--tiny) COUNT=(--no-count); fi  # a check: ops per step not counted
START=$(date +%s)
ALL="tests clamp throughput probe equivalence sweep"
GPU_TESTS="${GPU_TESTS:-tests/test_model_graphs_cuda.py}"

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"  # the sweep starts its own throw-away local cluster
mkdir -p "$OUT/packing"

DRY=0 SECTIONS=""
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

# prerequisites, one line: what the tests and the sections import
PREREQ=$("$PY" - <<'PYEOF' 2>&1 || true
import importlib
missing = []
for mod, name in (("torch", "torch"), ("pytest", "pytest"), ("pytest_timeout", "pytest-timeout")):
    try:
        importlib.import_module(mod)
    except Exception:  # noqa: BLE001
        missing.append(name)
try:
    import bench.gpu_bench, bench.gpu_plan, model.trainer  # noqa: F401
except Exception as exc:  # noqa: BLE001
    missing.append(f"the project ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
print("missing: " + "; ".join(missing) if missing else "ok")
PYEOF
)
echo "[gpu.sh] prerequisites (torch, pytest, pytest-timeout, the project importable) with $PY: $PREREQ"
if [ "$PREREQ" != ok ]; then
  if [ "$DRY" = 1 ] && ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[gpu.sh] no CUDA found (torch is not importable): nothing measured"
    exit 0
  fi
  [ "$DRY" = 1 ] || { echo "[gpu.sh] failed: prerequisites missing, nothing run"; exit 1; }
fi

# the plan: every item's budget, from what it runs (bench/gpu_plan.py); which sections fit this call
PLAN_OUT=$("$PY" -m bench.gpu_plan --out "$OUT" --seconds "$SECONDS_PER_VARIANT" --tests "$GPU_TESTS" \
  --budget-of "${SECTIONS:-auto}" ${BUDGET_S:+--call-budget "$BUDGET_S"} "${COUNT[@]}")
echo "$PLAN_OUT" | grep -v -E '^(BUDGET|SECTIONS|LATER) '
BUDGET_S="${BUDGET_S:-$(echo "$PLAN_OUT" | sed -n 's/^BUDGET //p')}"
if [ -z "$SECTIONS" ]; then
  SECTIONS=$(echo "$PLAN_OUT" | sed -n 's/^SECTIONS //p')
  LATER=$(echo "$PLAN_OUT" | sed -n 's/^LATER //p')
  if [ -n "$LATER" ]; then
    echo "[gpu.sh] not in this call (over its ${BUDGET_S}s): $LATER; a second call runs them: bash bench/gpu.sh $LATER"
  fi
fi
DEADLINE=$((START + BUDGET_S))
echo "[gpu.sh] $(date -u +%FT%TZ) python: $PY; out: $OUT; budget ${BUDGET_S}s; sections: $SECTIONS"

plan() {  # plan ITEM FIELD: a field of the plan's item (no torch import)
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]][sys.argv[4]])" \
    "$OUT/plan.json" items "$1" "$2"
}
GPU_TESTS_S="${GPU_TESTS_S:-$(plan gpu-tests budget_s)}"
PYTEST=("$PY" -m pytest -m gpu -q -rs -s -p no:cacheprovider -c "$ROOT/pyproject.toml" --rootdir "$ROOT")
if [ "$DRY" = 1 ]; then
  case " $SECTIONS " in *" tests "*)
    echo "[gpu.sh] first: ${PYTEST[*]} $GPU_TESTS (timeout ${GPU_TESTS_S}s; $(plan gpu-tests what))" ;;
  esac
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

FAILED=()  # every test run or item that failed or timed out, for the last line and the exit status

tests() {  # the GPU tests (skipped without CUDA, as in CPU_CHECK=1): the recorded step proven before it is timed
  local rc=0 t0 status summary budget=$GPU_TESTS_S left
  left=$((DEADLINE - $(date +%s) - RESERVED - 10))
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  if [ "$left" -lt 20 ]; then
    status="failed: not run, out of time (${left}s left)"
    echo "[gpu.sh] gpu-tests: $status"
    FAILED+=("gpu-tests $status")
    log gpu-tests tests "$GPU_TESTS_S" 0 null "$status"
    return 0
  fi
  t0=$(date +%s)
  echo "[gpu.sh] gpu-tests (timeout ${budget}s, planned $(plan gpu-tests budget_s)s): pytest -m gpu $GPU_TESTS"
  # shellcheck disable=SC2086  # GPU_TESTS: a list of paths
  timeout -k 10 "$budget" "${PYTEST[@]}" $GPU_TESTS > "$OUT/gpu_tests.log" 2>&1 || rc=$?
  grep -E '^\[gpu tests\]|passed|failed|skipped|error|FAILED|CUDA graphs off' "$OUT/gpu_tests.log" || true
  summary=$( (grep -E '^=* ?[0-9]+ (passed|failed|skipped|error|errors|deselected).* in [0-9.]+s' "$OUT/gpu_tests.log" || true) \
    | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="timed out after ${budget}s"
  elif [ "$rc" = 5 ]; then status="failed: no GPU test collected (pytest rc 5)"
  elif [ "$rc" != 0 ]; then status="failed (pytest rc $rc: ${summary:-no summary line}; see $OUT/gpu_tests.log)"
  else status="ok (${summary:-no summary line})"; fi
  [ "$rc" = 0 ] || FAILED+=("gpu-tests $status")
  echo "[gpu.sh] gpu-tests: $status in $(( $(date +%s) - t0 ))s"
  log gpu-tests tests "$budget" "$(( $(date +%s) - t0 ))" "$rc" "$status"
}

log() {  # log ITEM SECTION BUDGET RAN RC STATUS
  printf '{"item": "%s", "section": "%s", "budget_s": %s, "ran_s": %s, "rc": %s, "status": "%s"}\n' "$@" >> "$OUT/timings.jsonl"
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
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="timed out after ${budget}s"; elif [ "$rc" != 0 ]; then status="failed (rc $rc)"; fi
  [ "$rc" = 0 ] || FAILED+=("$item $status")
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
    --json "$OUT/clamp.json" --costs "$OUT/costs.json"
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
if [ "$SECTIONS" != tests ]; then  # the GPU tests alone measure nothing: their log is the report
  "$PY" -m bench.gpu_bench --report --out "$OUT" || echo "[gpu.sh] report failed"
fi
echo "[gpu.sh] done in $(( $(date +%s) - START ))s: $OUT (gpu_tests.log, timings.jsonl, gpu_results.json)"
if [ "${#FAILED[@]}" -gt 0 ]; then
  echo "[gpu.sh] failed: ${#FAILED[@]} of this call's runs did not pass: $(IFS=';'; echo "${FAILED[*]}")"
  exit 1
fi
