#!/usr/bin/env bash
# Hunt the intermittent illegal instruction (GPU machine, after gpu_session.sh's warm step):
# GPU core dumps on, then STRESS_PROCS processes of stress_first_calls.py for STRESS_SECONDS,
# then the GPU tests SUITES times (4 workers, as gpu_session.sh runs them), then SANITIZE_SECONDS
# of the stress script under compute-sanitizer memcheck. STRESS_ARGS go to each stress process.
# Any core dump is read with cuda-gdb:
# which kernel faulted, where, and why ($OUT/cores.log).
#   RUNS="bash scripts/device/fault_hunt.sh" SKIP_TESTS=1 bash scripts/device/detached.sh start
OUT=${OUT:-/tmp/fault_hunt}; mkdir -p "$OUT" /tmp/cores
if [ "${CORES:-1}" = 1 ]; then   # CORES=0: no dumps (a run expected to fault, for its count alone)
  export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION=0
  export CUDA_COREDUMP_FILE=/tmp/cores/core_%p
  export CUDA_COREDUMP_GENERATION_FLAGS="skip_global_memory,skip_shared_memory,skip_local_memory,skip_abort"
fi
t0=$(date +%s)
pids=()
for i in $(seq 1 ${STRESS_PROCS:-4}); do
  python3 scripts/device/stress_first_calls.py --seconds ${STRESS_SECONDS:-90} --tag "stress$i" $STRESS_ARGS \
    2> $OUT/stress$i.err &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p; echo "stress pid $p rc=$?"; done
echo "stress done $(( $(date +%s) - t0 ))s; cores: $(ls /tmp/cores | wc -l)"
for i in $(seq 1 ${SUITES:-2}); do
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q --tb=line -p no:cacheprovider -n 4 --dist loadfile \
    -o faulthandler_timeout=150 ${TESTS:-tests} > $OUT/suite$i.log 2>&1
  echo "suite $i rc=$? $(( $(date +%s) - t0 ))s: $(tail -1 $OUT/suite$i.log); cores: $(ls /tmp/cores | wc -l)"
  grep -E "^(FAILED|ERROR)" $OUT/suite$i.log | head -5
done
if [ -n "${SANITIZE_SECONDS}" ]; then
  unset CUDA_ENABLE_COREDUMP_ON_EXCEPTION
  # memory errors only (the CUDA API errors of libraries probing for entry points are not ours)
  timeout $(( SANITIZE_SECONDS + 150 )) compute-sanitizer --tool memcheck --report-api-errors no --print-limit 200 \
    python3 scripts/device/stress_first_calls.py --seconds $SANITIZE_SECONDS --tag sanitized > $OUT/sanitizer.log 2>&1
  echo "sanitizer rc=$? $(( $(date +%s) - t0 ))s"; grep -v "Host Frame" $OUT/sanitizer.log | tail -40
fi
for f in /tmp/cores/*; do
  [ -f "$f" ] || continue
  echo "== $f ($(stat -c %s $f) bytes)"
  timeout 120 cuda-gdb -batch -ex "set pagination off" -ex "target cudacore $f" -ex "info cuda kernels" \
    -ex "bt" -ex "x/6i \$pc" -ex "info cuda devices" 2>&1 | tail -40
done > $OUT/cores.log
cat $OUT/cores.log | head -120
