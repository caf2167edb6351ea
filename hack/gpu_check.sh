#!/usr/bin/env bash
# The whole real-GPU check in one command (docs/gpu.md), in under 8 minutes on one GPU:
#   1. the GPU is there (nvidia-smi) and is not the fake;
#   2. make venv native (the limiter and the test programs, built here);
#   3. the framework environment (hack/frameworks_env.py: the cached venv; on a machine without PyPI,
#      CARVE_FRAMEWORKS_WHEELHOUSE=DIR installs it from wheels downloaded elsewhere);
#   4. tests/gpu: the limiter on the driver API, CDI, enforcement, and cudart 12/13, CuPy and PyTorch on a
#      4 GiB / 30% slice (tests/gpu/test_frameworks_gpu.py);
#   5. a summary: one line per test (PASS/FAIL/SKIP) and the totals; exit status 0 only when nothing failed.
# GPU_CHECK_OUT=DIR keeps the JUnit report and the logs there (default: a temporary directory).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${GPU_CHECK_OUT:-$(mktemp -d)}
mkdir -p "$out"
start=$(date +%s)
step() { echo "== $(( $(date +%s) - start )) s: $*"; }

step "GPU"
if ! nvidia-smi -L; then echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)"; exit 2; fi

step "make venv native (log: $out/build.log)"
if ! make venv native >"$out/build.log" 2>&1; then tail -30 "$out/build.log"; echo "gpu_check: build failed"; exit 2; fi

step "framework environment"
if [ -n "${CARVE_FRAMEWORKS_PYTHON:-}" ]; then
  echo "using $CARVE_FRAMEWORKS_PYTHON (CARVE_FRAMEWORKS_PYTHON)"
elif py=$(.venv/bin/python hack/frameworks_env.py 2>"$out/frameworks_env.log"); then
  export CARVE_FRAMEWORKS_PYTHON=$py
  echo "using $py"
else
  tail -5 "$out/frameworks_env.log"
  echo "gpu_check: no framework environment: the framework cases will fail naming it (docs/gpu.md, wheelhouse)"
fi

step "tests/gpu (report: $out/gpu.xml)"
left=$(( 450 - ($(date +%s) - start) ))
timeout --kill-after=10 "$left" .venv/bin/python -m pytest -q -p no:cacheprovider -o timeout=240 tests/gpu \
  --junitxml="$out/gpu.xml" >"$out/pytest.log" 2>&1
rc=$?
tail -3 "$out/pytest.log"
[ "$rc" = 124 ] && echo "gpu_check: tests/gpu ran past the time left ($left s)"

step "summary"
.venv/bin/python - "$out/gpu.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError) as e:
    print(f"no report ({e})")
    sys.exit(0)
totals = {"PASS": 0, "FAIL": 0, "SKIP": 0}
for c in cases:
    bad = c.find("failure") if c.find("failure") is not None else c.find("error")
    state = "FAIL" if bad is not None else "SKIP" if c.find("skipped") is not None else "PASS"
    totals[state] += 1
    why = (bad.get("message") or "") if bad is not None else (c.find("skipped").get("message") or "") if state == "SKIP" else ""
    print(f"{state}  {c.get('classname', '').split('.')[-1]}::{c.get('name')}  {why.splitlines()[0][:120] if why else ''}")
print(" ".join(f"{k}={v}" for k, v in totals.items()))
PY
step "done (exit $rc)"
exit "$rc"
