#!/usr/bin/env bash
# One GPU-machine session, run from the repository root there: install the carried wheels
# (.whl/), copy the carried cache (.device/compiled_cache.db) into a private directory,
# compile missing kernels in parallel, (SWEEP=script) run a sweep, run the GPU tests
# (unless SKIP_TESTS), then (BENCH set) scripts/bench.py
# and scripts/run_gemm.py. Logs go under $OUT (the device tool's output folder).
OUT=${OUT:-/tmp/gpu_session_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD CUTLASS_SPARSE_CACHE=/tmp/csd/cs.db PYTHONUNBUFFERED=1
mkdir -m 700 -p /tmp/csd; [ -f /tmp/csd/cs.db ] || cp .device/compiled_cache.db /tmp/csd/cs.db
t0=$(date +%s)
timeout 300 python3 -m tests.gpu_cases --arch sm_90 --jobs 16 > $OUT/warm80.log 2>&1; echo "warm sm80 rc=$? $(( $(date +%s) - t0 ))s"
timeout ${WARM90_TIMEOUT:-400} python3 -m tests.gpu_cases --family sm90 --arch sm_90a --jobs 16 > $OUT/warm90.log 2>&1; echo "warm sm90 rc=$? $(( $(date +%s) - t0 ))s"; grep -c compiled $OUT/warm90.log; grep failed $OUT/warm90.log | head -3
[ -n "$SWEEP" ] && { timeout ${SWEEP_TIMEOUT:-300} python3 $SWEEP > $OUT/sweep.log 2>&1; echo "sweep rc=$? $(( $(date +%s) - t0 ))s"; cat $OUT/sweep.log; }
[ -n "$SKIP_TESTS" ] || timeout ${TEST_TIMEOUT:-240} python3 -m pytest -m gpu -q --tb=short -p no:cacheprovider tests > $OUT/gpu_tests.log 2>&1; echo "pytest rc=$? $(( $(date +%s) - t0 ))s"
tail -25 $OUT/gpu_tests.log
[ -n "$BENCH" ] && timeout 260 python3 scripts/bench.py --json $OUT/bench.json --png $OUT/bench.png $BENCH > $OUT/bench.log 2>&1; cat $OUT/bench.log 2>/dev/null
timeout 60 python3 scripts/run_gemm.py --m 4096 --n 4096 --k 4096 > $OUT/run_gemm.log 2>&1; cat $OUT/run_gemm.log
if [ -n "$EXTRAS" ]; then   # issue 4/5 measurements: host overhead, profiler tables
  timeout 60 python3 scripts/host_overhead.py > $OUT/overhead.log 2>&1; cat $OUT/overhead.log
  timeout 60 python3 scripts/host_overhead.py --family sm90 >> $OUT/overhead.log 2>&1; tail -3 $OUT/overhead.log
  timeout 240 python3 scripts/run_gemm.py --m 4096 --n 4096 --k 4096 --profile > $OUT/profile_4096.log 2>&1; grep -v "^\[" $OUT/profile_4096.log
  timeout 240 python3 scripts/run_gemm.py --m 4096 --n 16 --k 4096 --profile > $OUT/profile_4096x16.log 2>&1; grep -v "^\[" $OUT/profile_4096x16.log
fi
echo "total $(( $(date +%s) - t0 ))s"
