#!/usr/bin/env bash
# benchmarks/gpu_check.sh — the one-shot GPU check: one command on a GPU machine with no network.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        # default OUT_DIR: ./gpu-check-out
#
# Nothing has run on a GPU yet: docs/gpu-check.md says what this does on the first one.
#
# Steps, in order, each with its own time limit (LIMITS below; they add up to the default budget,
# CSA_GPU_CHECK_BUDGET_S = 460 s; a late step is shortened or skipped rather than let overrun,
# and the summary is always written):
#   install    pip install --no-build-isolation --no-deps --no-index -e .   (offline; nothing fetched)
#              fallback without pip (or when that fails): a csa_plan namespace of symlinks on PYTHONPATH
#   facts      machine facts: GPU, clocks, driver (nvidia-smi), Python, CuPy, nvcc, CUDA wheels, and
#              where CuPy will find the CUDA runtime headers and NVRTC (kernels/cuda_headers.py)
#   compile    the kernel module compiled once by NVRTC into CuPy's kernel cache
#              (kernels/gpu_compile.py); every later step loads it from there
#   tiny       csa-plan run-gpu --tiny
#   memcheck   compute-sanitizer --tool memcheck  on the small kernel probe (probe --small)
#   racecheck  compute-sanitizer --tool racecheck on the small kernel probe
#   probe      the 1M-token kernel probe (kernels/probe.py): V4-Flash and V4-Pro geometry, batch 1 and
#              16, 16/64/128 heads, HCA and CSA attention, indexer, top-k 1024 of 262,144; oracle
#              checks, bit-identical second launch, device time per call (CUDA graph) with the host's
#              time apart, device-to-device copy ceiling                            -> probe.json
#   run_gpu    csa-plan run-gpu deepseek-v4-pro (128 heads, 131,072 tokens, 1 request) --json
#                                                                                   -> run_gpu_pro.json
#   bench      benchmarks/bench_kernels.py --from-probe probe.json --json: the probe's figures against
#              the throughput model (no second run of the kernels)                 -> bench.json
#
# CUDA headers: CuPy 14 takes cuda_runtime.h only from NVIDIA wheels, a conda prefix or
# CUDA_PATH / CUDA_HOME. When neither variable is set and a toolkit's headers are there
# (CSA_GPU_CHECK_CUDA_ROOTS, default /usr/local/cuda, then nvcc's own root) the script exports
# CUDA_PATH to it; with no headers anywhere every GPU step exits 5 naming the fix.
#
# Every step's status: pass (exit 0), fail (any other exit), timeout (124/137), no-gpu (a GPU step
# that exited 5: no usable GPU, its log says why), unavailable (6: compute-sanitizer not found),
# skipped (no time left in the budget). Outputs: OUT_DIR/<step>.log, the JSON files above, and
# OUT_DIR/summary.json (schema csa-plan/gpu-check/v2: per step its limit, seconds and the host
# CPU seconds its processes used), also printed at the end.
#
# Exit code: 0 every step passed; 5 no usable GPU (every GPU step reported no-gpu, every other step
# passed) — what a CPU-only machine gives; 1 anything else (a failure, a timeout, a skipped step).
#
# Environment: PYTHON (default python3), CSA_GPU_CHECK_BUDGET_S, CSA_GPU_CHECK_INSTALL
# (auto | pip | pythonpath; default auto), COMPUTE_SANITIZER (path to the tool),
# CSA_GPU_CHECK_CUDA_ROOTS (toolkit roots CUDA_PATH may be set to; default /usr/local/cuda),
# CSA_GPU_CHECK_SLOWDOWN (a factor on every limit; tests only).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$PWD/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
# Per-step limits in seconds, one table; they sum to the default budget (tests/kernels/test_gpu_check.py
# checks that, and each step's host work on the test-double CuPy against half its limit).
declare -A LIMITS=([install]=30 [facts]=15 [compile]=120 [tiny]=20 [memcheck]=30 [racecheck]=30 [probe]=80
                   [run_gpu]=120 [bench]=15)
# CSA_GPU_CHECK_SLOWDOWN (default 1) multiplies every limit and the budget: for the test that runs
# the whole check on the test-double CuPy on a loaded 2-core machine, not for a GPU run
SLOWDOWN=${CSA_GPU_CHECK_SLOWDOWN:-1}
BUDGET=$(( ${CSA_GPU_CHECK_BUDGET_S:-460} * SLOWDOWN ))
INSTALL=${CSA_GPU_CHECK_INSTALL:-auto}
NO_GPU=5
UNAVAILABLE=6
START=$(date +%s)
STEPS_TSV="$OUT/steps.tsv"
CPU_FILE="$OUT/.times"
: > "$STEPS_TSV"
INSTALL_MODE=none

now() { date +%s%N; }
since() {  # seconds since a now() reading, as D.DDD
  local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
  printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 ))
}

cpu_now() {  # CPU_NOW = user + system seconds of every finished child so far (bash's times, second
  # line; called in this shell, not in a $(...) subshell, whose own children would be counted)
  times > "$CPU_FILE"
  CPU_NOW=$(awk 'NR == 2 {s = 0; for (i = 1; i <= 2; i++) {split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2]}
                         printf "%.3f", s}' "$CPU_FILE")
}

record() {  # name gpu rc status seconds limit nominal_limit cpu_seconds
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" >> "$STEPS_TSV"
  printf '%-10s %-12s rc=%-4s %8ss (limit %ss, host cpu %ss)\n' "$1" "$4" "$3" "$5" "$6" "$8"
}

# step NAME GPU(0|1) COMMAND... : run under timeout (LIMITS[NAME], clipped to what is left of the
# budget), log to OUT/NAME.log, record the status, the seconds and the host CPU seconds.
step() {
  local name=$1 gpu=$2
  shift 2
  local nominal=${LIMITS[$name]}
  local limit=$(( nominal * SLOWDOWN ))
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if (( left < 5 )); then
    record "$name" "$gpu" -1 skipped 0 0 "$nominal" 0
    return
  fi
  (( limit > left )) && limit=$left
  local t0 rc status c0 cpu
  t0=$(now)
  cpu_now
  c0=$CPU_NOW
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  cpu_now
  cpu=$(awk -v a="$c0" -v b="$CPU_NOW" 'BEGIN {printf "%.3f", b - a}')
  if (( rc == 0 )); then status=pass
  elif (( rc == 124 || rc == 137 )); then status=timeout
  elif (( gpu == 1 && rc == NO_GPU )); then status=no-gpu
  elif (( rc == UNAVAILABLE )); then status=unavailable
  else status=fail
  fi
  record "$name" "$gpu" "$rc" "$status" "$(since "$t0")" "$limit" "$nominal" "$cpu"
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
  "$PY" - <<'PYEOF'
import importlib.metadata as md, json, os, platform, shutil, subprocess, sys
out = {"python": sys.version.split()[0], "platform": platform.platform()}
for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy", "numpy", "click", "rich", "pyyaml", "nvidia-cuda-nvrtc",
             "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "cuda-pathfinder"):
    try:
        out[dist] = md.version(dist)
    except md.PackageNotFoundError:
        pass
nvcc = shutil.which("nvcc")
if nvcc:
    out["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
for var in ("CUDA_PATH", "CUDA_HOME", "CSA_GPU_CHECK_SET_CUDA_PATH", "CUPY_CACHE_DIR"):
    out[var] = os.environ.get(var, "<unset>")
try:
    import cupy
    out["cupy_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    out["cupy_driver"] = cupy.cuda.runtime.driverGetVersion()
    out["devices"] = cupy.cuda.runtime.getDeviceCount()
except Exception as exc:
    out["cupy_error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(out, indent=1))
PYEOF
  # where CuPy's compile will take cuda_runtime.h and NVRTC from; with no headers it says the fix
  # (and exits 5: the GPU steps then report no-gpu with the same line; facts itself passes)
  "$PY" -m csa_plan.kernels.cuda_headers || true
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

gpu_or_no_gpu() {  # exit 5 with the reason when there is no usable GPU (or no headers for CuPy)
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

bench_from_probe() {  # the probe's figures against the model (no GPU: 5, as every GPU step)
  gpu_or_no_gpu || return $?
  "$PY" "$ROOT/benchmarks/bench_kernels.py" --from-probe "$OUT/probe.json" --json > "$OUT/bench.json"
}

set_cuda_path() {  # CuPy 14 looks at CUDA_PATH / CUDA_HOME, never at /usr/local/cuda by itself
  [[ -n "${CUDA_PATH:-}" || -n "${CUDA_HOME:-}" ]] && return
  local roots=${CSA_GPU_CHECK_CUDA_ROOTS:-/usr/local/cuda} nvcc r
  nvcc=$(command -v nvcc || true)
  [[ -n "$nvcc" ]] && roots="$roots $(dirname "$(dirname "$(readlink -f "$nvcc")")")"
  for r in $roots; do
    if [[ -f "$r/include/cuda_runtime.h" ]]; then
      export CUDA_PATH=$r CSA_GPU_CHECK_SET_CUDA_PATH="set by gpu_check.sh: $r/include/cuda_runtime.h"
      return
    fi
  done
}

export PY ROOT OUT UNAVAILABLE
export -f facts csa gpu_or_no_gpu sanitize bench_from_probe

# ---------------------------------------------------------------------------------------- steps
echo "gpu_check: $ROOT -> $OUT (budget ${BUDGET}s)"
set_cuda_path
[[ -n "${CSA_GPU_CHECK_SET_CUDA_PATH:-}" ]] && echo "gpu_check: CUDA_PATH=$CUDA_PATH ($CSA_GPU_CHECK_SET_CUDA_PATH)"

t0=$(now)
cpu_now
c0=$CPU_NOW
rc=0
lim=$(( ${LIMITS[install]} * SLOWDOWN ))
case "$INSTALL" in
  pythonpath) rc=1 ;;
  *) timeout -k 5 "$lim" bash -c "$(declare -f pip_install); PY='$PY' ROOT='$ROOT' pip_install" > "$OUT/install.log" 2>&1
     rc=$? ;;
esac
if (( rc == 0 )) && importable; then
  INSTALL_MODE=pip
elif [[ "$INSTALL" != pip ]]; then
  echo "pip install unavailable or failed (rc $rc): PYTHONPATH fallback" >> "$OUT/install.log"
  pythonpath_install
  importable && INSTALL_MODE=pythonpath
fi
cpu_now
cpu=$(awk -v a="$c0" -v b="$CPU_NOW" 'BEGIN {printf "%.3f", b - a}')
if [[ "$INSTALL_MODE" == none ]]; then
  record install 0 1 fail "$(since "$t0")" "$lim" "${LIMITS[install]}" "$cpu"
else
  echo "install mode: $INSTALL_MODE" >> "$OUT/install.log"
  record install 0 0 pass "$(since "$t0")" "$lim" "${LIMITS[install]}" "$cpu"
fi

step facts 0 facts
step compile 1 "$PY" -m csa_plan.kernels.gpu_compile
step tiny 1 csa run-gpu --tiny
step memcheck 1 sanitize memcheck
step racecheck 1 sanitize racecheck
step probe 1 "$PY" -m csa_plan.kernels.probe --json "$OUT/probe.json"
step run_gpu 1 bash -c "\"$PY\" -m csa_plan.cli.main run-gpu deepseek-v4-pro --requests 1 --json > \"$OUT/run_gpu_pro.json\""
step bench 1 bench_from_probe

# --------------------------------------------------------------------------------------- summary
ELAPSED=$(( $(date +%s) - START ))
EXIT=$(awk -F '\t' '$4 != "pass" && $4 != "no-gpu" && $4 != "unavailable" {bad = 1}
                     $4 == "no-gpu" {nogpu = 1}
                     END {print bad ? 1 : (nogpu ? 5 : 0)}' "$STEPS_TSV")
"$PY" - "$OUT" "$STEPS_TSV" "$EXIT" "$ELAPSED" "$INSTALL_MODE" "${CSA_GPU_CHECK_BUDGET_S:-460}" "$SLOWDOWN" \
  "${CSA_GPU_CHECK_SET_CUDA_PATH:-}" <<'PYEOF' || echo "gpu_check: could not write summary.json (python failed); steps in $STEPS_TSV"
import json, os, sys
out, tsv, code, elapsed, mode, budget, slowdown, cuda_path_set = sys.argv[1:9]
steps = []
for line in open(tsv):
    name, gpu, rc, status, secs, limit, nominal, cpu = line.rstrip("\n").split("\t")
    log = os.path.join(out, name + ".log")
    tail = ""
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
        tail = "\n".join(lines[-5:])
    steps.append({"name": name, "gpu": gpu == "1", "rc": int(rc), "status": status, "seconds": float(secs),
                  "timeout_s": int(limit), "limit_s": int(nominal), "host_cpu_s": float(cpu), "log": log,
                  "log_tail": tail})
artifacts = {}
for key, fname in (("probe", "probe.json"), ("run_gpu", "run_gpu_pro.json"), ("bench", "bench.json")):
    path = os.path.join(out, fname)
    if os.path.exists(path) and os.path.getsize(path):
        try:
            doc = json.load(open(path))
            if doc.get("schema") == "csa-plan/error/v1":  # the command's own error document (run-gpu --json, no GPU)
                artifacts[key] = {"file": path, "error": doc.get("message"), "exit_code": doc.get("exit_code")}
            else:
                artifacts[key] = {"file": path, "failed": doc.get("failed"), "checks": len(doc.get("checks", []))}
        except ValueError:
            artifacts[key] = {"file": path, "error": "not JSON"}
doc = {"schema": "csa-plan/gpu-check/v2", "exit_code": int(code), "seconds": int(elapsed), "budget_s": int(budget),
       "slowdown": int(slowdown), "install_mode": mode, "cuda_path_set": cuda_path_set or None, "no_gpu_code": 5, "steps": steps,
       "artifacts": artifacts}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print(json.dumps({k: doc[k] for k in ("schema", "exit_code", "seconds", "install_mode", "cuda_path_set")}))
for s in steps:
    print(f"  {s['name']:<10} {s['status']:<12} rc={s['rc']:<4} {s['seconds']:6.1f}s of {s['limit_s']:>3}s "
          f"(host cpu {s['host_cpu_s']:5.1f}s)")
PYEOF
rm -f "$CPU_FILE"
echo "gpu_check: summary in $OUT/summary.json; exit $EXIT (0 all passed, 5 no usable GPU, 1 a step failed)"
exit $EXIT
