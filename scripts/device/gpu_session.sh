#!/usr/bin/env bash
# One GPU-machine session, run from the repository root there: install the carried wheels
# (.whl/), unpack the carried cache (.device/compiled_cache.db.gz, made on the CPU machine by
# `python -m tests.gpu_cases --family session`) into a private directory, compile whatever
# is still missing, then run what the environment asks for:
#   SWEEP="scripts"   sweep or experiment scripts, in order (scripts/device/*.py)
#   RUNS="cmd; cmd"   commands with their own arguments, in order, after the sweeps ($OUT/runs.log)
#   SKIP_TESTS=1      no GPU tests (else the gpu-marked tests under $TESTS, default tests/,
#                     files spread over 4 workers)
#   BENCH="args"      scripts/bench.py with these arguments (" " for the defaults)
#   EXTRAS=1          host overhead (PROFILE=1: and the profiler tables, 4096^3 and 4096x16x4096)
#   EAGER="args"      scripts/bench_eager.py with these arguments (" " for the defaults)
#   SKIP_WARM=1       do not compile the session's kernels first (a sweep compiles its own)
#   WARM_JOBS=N       the warm step's compile workers (default 16: nvidia-h200's cores; 32 on -x2)
#   WARM_FAMILY=tests the warm step compiles the GPU tests' kernels alone (default: session)
#   SAVE_CACHE=1      $OUT/compiled_cache.db.gz: the cache after compiling what was missing
#   NCU=1             Nsight Compute: DRAM/SM throughput of our kernel at decode shapes and 8192^3
#                     (scripts/bench.py --ncu: each row's own kernel, by its exact name)
# Logs go under $OUT (the device tool's output folder; at most 8 files come back).
OUT=${OUT:-/tmp/gpu_session_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD CUTLASS_SPARSE_CACHE=/tmp/csd/cs.db PYTHONUNBUFFERED=1
mkdir -m 700 -p /tmp/csd; [ -f /tmp/csd/cs.db ] || gunzip -c .device/compiled_cache.db.gz > /tmp/csd/cs.db
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
t0=$(date +%s)
if [ -z "$SKIP_WARM" ]; then   # SKIP_WARM=1: a sweep that compiles only its own kernels
  timeout ${WARM_TIMEOUT:-400} python3 -m tests.gpu_cases --family ${WARM_FAMILY:-session} --jobs ${WARM_JOBS:-16} > $OUT/warm.log 2>&1
  echo "warm rc=$? $(( $(date +%s) - t0 ))s: $(grep -c '^cached' $OUT/warm.log) cached, $(grep -c '^compiled' $OUT/warm.log) compiled"
  grep '^failed' $OUT/warm.log | head -5
fi
if [ -n "$SAVE_CACHE" ]; then   # bring the warmed cache back (carry it as .device/ next time)
  python3 -c "import sqlite3; s=sqlite3.connect('/tmp/csd/cs.db'); d=sqlite3.connect('/tmp/csd/snap.db'); s.backup(d); d.close()"
  # in parts under the 16 MiB a returned file may have: cat them into .device/compiled_cache.db.gz
  gzip -9 -c /tmp/csd/snap.db | split -b 15m - $OUT/compiled_cache.db.gz.part-; ls -la $OUT/compiled_cache.db.gz.part-*
fi
for script in $SWEEP; do
  timeout ${SWEEP_TIMEOUT:-300} python3 $script $SWEEP_ARGS >> $OUT/sweep.log 2>&1; echo "$script rc=$? $(( $(date +%s) - t0 ))s"
done; [ -n "$SWEEP" ] && cat $OUT/sweep.log
if [ -n "$RUNS" ]; then
  IFS=';' read -ra commands <<< "$RUNS"
  for command in "${commands[@]}"; do
    echo "== $command" >> $OUT/runs.log
    timeout ${RUN_TIMEOUT:-300} bash -c "$command" >> $OUT/runs.log 2>&1; echo "$command rc=$? $(( $(date +%s) - t0 ))s"
  done; cat $OUT/runs.log
fi
[ -n "$BENCH" ] && { timeout ${BENCH_TIMEOUT:-260} python3 scripts/bench.py --json $OUT/bench.json --png $OUT/bench.png $BENCH > $OUT/bench.log 2>&1; cat $OUT/bench.log; }
[ -n "$EAGER" ] && echo "GPU processes before bench_eager: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
[ -n "$EAGER" ] && { timeout ${EAGER_TIMEOUT:-300} python3 scripts/bench_eager.py --json $OUT/bench_eager.json $EAGER > $OUT/bench_eager.log 2>&1; echo "bench_eager rc=$?"; cat $OUT/bench_eager.log; }
# the GPU tests after the timed runs: their worker processes must not share the GPU with them
if [ -z "$SKIP_TESTS" ]; then
  timeout ${TEST_TIMEOUT:-400} python3 -m pytest -m gpu -q --tb=short -p no:cacheprovider -n 4 --dist loadfile \
    -o faulthandler_timeout=150 ${TESTS:-tests} > $OUT/gpu_tests.log 2>&1
  echo "pytest rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests.log | head -40; tail -1 $OUT/gpu_tests.log
fi
if [ -z "$SKIP_WARM" ]; then   # its kernel is among the warmed ones
  timeout 60 python3 scripts/run_gemm.py --m 4096 --n 4096 --k 4096 > $OUT/run_gemm.log 2>&1; cat $OUT/run_gemm.log
fi
if [ -n "$EXTRAS" ]; then   # issue 4/5 measurements: host overhead (and PROFILE=1: profiler tables)
  { timeout 60 python3 scripts/host_overhead.py; timeout 60 python3 scripts/host_overhead.py --family sm90
    [ -n "$PROFILE" ] && for n in 4096 16; do
      timeout 200 python3 scripts/run_gemm.py --m 4096 --n $n --k 4096 --profile | grep -v "^\["; done
  } > $OUT/extras.log 2>&1; cat $OUT/extras.log
fi
if [ -n "$NCU" ]; then   # Nsight Compute: DRAM and SM throughput of the kernel each row ran (bench --ncu)
  timeout ${NCU_TIMEOUT:-400} python3 scripts/bench.py --dtypes f16 --ncu --json $OUT/ncu.json --png /dev/null \
    --shapes ${NCU_SHAPES:-4096x16x4096,14336x16x4096,4096x128x4096,8192x8192x8192} > $OUT/ncu.log 2>&1
  echo "ncu rc=$?"; cat $OUT/ncu.log
fi
echo "total $(( $(date +%s) - t0 ))s"
