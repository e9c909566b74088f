#!/usr/bin/env bash
# benchmarks/gpu_check.sh — the one-shot GPU check: one command on a GPU machine with no network.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        # default OUT_DIR: ./gpu-check-out
#
# Steps (each with its own timeout; the whole run stays under CSA_GPU_CHECK_BUDGET_S, default
# 460 s, shrinking or skipping the last steps rather than overrunning; the summary is always written):
#   facts      machine facts: GPU, clocks, driver (nvidia-smi), Python, CuPy, nvcc, CUDA wheels
#   install    pip install --no-build-isolation --no-deps --no-index -e .   (offline; nothing fetched)
#              fallback without pip (or when that fails): a csa_plan namespace of symlinks on PYTHONPATH
#   tiny       csa-plan run-gpu --tiny
#   memcheck   compute-sanitizer --tool memcheck  on the small kernel probe
#   racecheck  compute-sanitizer --tool racecheck on the small kernel probe
#   probe      the 1M-token kernel probe (kernels/probe.py): V4-Flash and V4-Pro geometry, batch 1 and 16,
#              16/64/128 heads, HCA and CSA attention, indexer, top-k 1024 of 262,144; oracle checks,
#              bit-identical second launch, cold/hot timings, device-to-device copy ceiling -> probe.json
#   run_gpu    csa-plan run-gpu deepseek-v4-pro (128 heads, 131,072 tokens) --json      -> run_gpu_pro.json
#   bench      benchmarks/bench_kernels.py --requests 16 --iters 10 --json                                        -> bench.json
#
# Every step's status: pass (exit 0), fail (any other exit), timeout (124/137), no-gpu (a GPU step
# that exited 5: no usable GPU, its log says why), unavailable (6: compute-sanitizer not found),
# skipped (no time left in the budget). Outputs: OUT_DIR/<step>.log, the JSON files above, and
# OUT_DIR/summary.json (schema csa-plan/gpu-check/v1), also printed at the end.
#
# Exit code: 0 every step passed; 5 no usable GPU (every GPU step reported no-gpu, every other step
# passed) — what a CPU-only machine gives; 1 anything else (a failure, a timeout, a skipped step).
#
# Environment: PYTHON (default python3), CSA_GPU_CHECK_BUDGET_S, CSA_GPU_CHECK_INSTALL
# (auto | pip | pythonpath; default auto), COMPUTE_SANITIZER (path to the tool).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$PWD/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
BUDGET=${CSA_GPU_CHECK_BUDGET_S:-460}
INSTALL=${CSA_GPU_CHECK_INSTALL:-auto}
NO_GPU=5
UNAVAILABLE=6
START=$(date +%s)
SUMMARY_RESERVE=10
STEPS_TSV="$OUT/steps.tsv"
: > "$STEPS_TSV"
INSTALL_MODE=none

now() { date +%s%N; }
since() {  # seconds since a now() reading, as D.DDD
  local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
  printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 ))
}

record() {  # name gpu rc status seconds limit
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >> "$STEPS_TSV"
  printf '%-10s %-12s rc=%-4s %8ss (limit %ss)\n' "$1" "$4" "$3" "$5" "$6"
}

# step NAME GPU(0|1) LIMIT_S COMMAND... : run under timeout, log to OUT/NAME.log, record the status.
step() {
  local name=$1 gpu=$2 limit=$3
  shift 3
  local left=$(( BUDGET - ($(date +%s) - START) - SUMMARY_RESERVE ))
  if (( left < 5 )); then
    record "$name" "$gpu" -1 skipped 0 0
    return
  fi
  (( limit > left )) && limit=$left
  local t0 rc status
  t0=$(now)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if (( rc == 0 )); then status=pass
  elif (( rc == 124 || rc == 137 )); then status=timeout
  elif (( gpu == 1 && rc == NO_GPU )); then status=no-gpu
  elif (( rc == UNAVAILABLE )); then status=unavailable
  else status=fail
  fi
  record "$name" "$gpu" "$rc" "$status" "$(since "$t0")" "$limit"
}

csa() { "$PY" -m csa_plan.cli.main "$@"; }

facts() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  if command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit \
      --format=csv || true
  else
    echo "nvidia-smi: not found"
  fi
  "$PY" - <<'EOF'
import importlib.metadata as md, json, platform, shutil, subprocess, sys
out = {"python": sys.version.split()[0], "platform": platform.platform()}
for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy", "numpy", "click", "rich", "pyyaml", "nvidia-cuda-nvrtc",
             "nvidia-cuda-nvrtc-cu12", "cuda-pathfinder"):
    try:
        out[dist] = md.version(dist)
    except md.PackageNotFoundError:
        pass
nvcc = shutil.which("nvcc")
if nvcc:
    out["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
try:
    import cupy
    out["cupy_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    out["cupy_driver"] = cupy.cuda.runtime.driverGetVersion()
    out["devices"] = cupy.cuda.runtime.getDeviceCount()
except Exception as exc:
    out["cupy_error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(out, indent=1))
EOF
}

pip_install() {
  "$PY" -m pip --version || return 1
  "$PY" -m pip install --no-build-isolation --no-deps --no-index -e "$ROOT"
}

pythonpath_install() {  # no pip at all: csa_plan.{cli,planner,kernels} as symlinks into the checkout
  local pp="$OUT/pythonpath"
  mkdir -p "$pp/csa_plan"
  for pkg in cli planner kernels; do ln -sfn "$ROOT/$pkg" "$pp/csa_plan/$pkg"; done
  export PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}"
}

importable() { "$PY" -c "import csa_plan.cli.main, csa_plan.kernels.run_checks" > /dev/null 2>&1; }

gpu_or_no_gpu() {  # exit 5 with the reason when there is no usable GPU
  "$PY" -c "
import sys
from csa_plan.kernels.gpu_env import gpu_unavailable_reason
r = gpu_unavailable_reason()
if r:
    print('gpu_check:', r)
    sys.exit(5)
"
}

sanitize() {  # sanitize TOOL: compute-sanitizer on the small probe
  gpu_or_no_gpu || return $?
  local cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
  [[ -z "$cs" && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
  if [[ -z "$cs" ]]; then
    echo "gpu_check: compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)"
    return $UNAVAILABLE
  fi
  "$cs" --tool "$1" --error-exitcode 9 --print-limit 20 "$PY" -m csa_plan.kernels.probe --small
}

export PY ROOT OUT UNAVAILABLE
export -f facts csa gpu_or_no_gpu sanitize

# ---------------------------------------------------------------------------------------- steps
echo "gpu_check: $ROOT -> $OUT (budget ${BUDGET}s)"
step facts 0 15 facts

t0=$(now)
rc=0
case "$INSTALL" in
  pythonpath) rc=1 ;;
  *) timeout -k 5 45 bash -c "$(declare -f pip_install); PY='$PY' ROOT='$ROOT' pip_install" > "$OUT/install.log" 2>&1
     rc=$? ;;
esac
if (( rc == 0 )) && importable; then
  INSTALL_MODE=pip
elif [[ "$INSTALL" != pip ]]; then
  echo "pip install unavailable or failed (rc $rc): PYTHONPATH fallback" >> "$OUT/install.log"
  pythonpath_install
  importable && INSTALL_MODE=pythonpath
fi
if [[ "$INSTALL_MODE" == none ]]; then
  record install 0 1 fail "$(since "$t0")" 45
else
  echo "install mode: $INSTALL_MODE" >> "$OUT/install.log"
  record install 0 0 pass "$(since "$t0")" 45
fi

step tiny 1 45 csa run-gpu --tiny
step memcheck 1 40 sanitize memcheck
step racecheck 1 40 sanitize racecheck
step probe 1 150 "$PY" -m csa_plan.kernels.probe --json "$OUT/probe.json"
step run_gpu 1 75 bash -c "\"$PY\" -m csa_plan.cli.main run-gpu deepseek-v4-pro --json > \"$OUT/run_gpu_pro.json\""
step bench 1 60 bash -c "\"$PY\" \"$ROOT/benchmarks/bench_kernels.py\" --requests 16 --iters 10 --json > \"$OUT/bench.json\""

# --------------------------------------------------------------------------------------- summary
ELAPSED=$(( $(date +%s) - START ))
EXIT=0
EXIT=$(awk -F '\t' '$4 != "pass" && $4 != "no-gpu" && $4 != "unavailable" {bad = 1}
                     $4 == "no-gpu" {nogpu = 1}
                     END {print bad ? 1 : (nogpu ? 5 : 0)}' "$STEPS_TSV")
"$PY" - "$OUT" "$STEPS_TSV" "$EXIT" "$ELAPSED" "$INSTALL_MODE" "$BUDGET" <<'EOF' || echo "gpu_check: could not write summary.json (python failed); steps in $STEPS_TSV"
import json, os, sys
out, tsv, code, elapsed, mode, budget = sys.argv[1:7]
steps = []
for line in open(tsv):
    name, gpu, rc, status, secs, limit = line.rstrip("\n").split("\t")
    log = os.path.join(out, name + ".log")
    tail = ""
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
        tail = "\n".join(lines[-5:])
    steps.append({"name": name, "gpu": gpu == "1", "rc": int(rc), "status": status, "seconds": float(secs),
                  "timeout_s": int(limit), "log": log, "log_tail": tail})
artifacts = {}
for key, fname in (("probe", "probe.json"), ("run_gpu", "run_gpu_pro.json"), ("bench", "bench.json")):
    path = os.path.join(out, fname)
    if os.path.exists(path) and os.path.getsize(path):
        try:
            doc = json.load(open(path))
            artifacts[key] = {"file": path, "failed": doc.get("failed"), "checks": len(doc.get("checks", []))}
        except ValueError:
            artifacts[key] = {"file": path, "error": "not JSON"}
doc = {"schema": "csa-plan/gpu-check/v1", "exit_code": int(code), "seconds": int(elapsed), "budget_s": int(budget),
       "install_mode": mode, "no_gpu_code": 5, "steps": steps, "artifacts": artifacts}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(json.dumps({k: doc[k] for k in ("schema", "exit_code", "seconds", "install_mode")}))
for s in steps:
    print(f"  {s['name']:<10} {s['status']:<12} rc={s['rc']:<4} {s['seconds']:6.1f}s")
EOF
echo "gpu_check: summary in $OUT/summary.json; exit $EXIT (0 all passed, 5 no usable GPU, 1 a step failed)"
exit $EXIT
