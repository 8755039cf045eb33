#!/usr/bin/env bash
# The CUDA 12 stack's GPU check on the device image, whose Python stack is CUDA 13's: NVRTC
# 12.9, the CUDA 12.9 header wheels and cuda-bindings 12.9 travel in .cu12/ (README, "CUDA 12
# on the GPU machine"); CuPy and torch are the image's (CUDA 13 builds: CuPy for CUDA 12 and
# the cuBLAS its dense references need are 690 MB, more than a device call carries). The test
# catalogs' kernels compile there (16 processes), then the GPU tests named in $TESTS run.
OUT=${OUT:-/tmp/cu12_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .cu12/nvidia_cutlass-*.whl || exit 1
# .cu12/cuda12.tar.xz: site12/ (cuda-bindings 12.9 and the CUDA 12.9 header wheels, unpacked)
# and root12/ (NVRTC 12.9 in lib64/, its headers and CUDA 12.9's in include/)
tar xJf .cu12/cuda12.tar.xz -C /tmp || exit 1
# cuda.pathfinder, which loads NVRTC for cuda-bindings and CuPy alike, would find the image's
# NVRTC 13 first; a library already loaded is taken as it is, so every process loads NVRTC
# 12.9 first (sitecustomize; an image's own sitecustomize runs after). CuPy then takes its
# CUDA headers from the root beside that library: CUDA 12.9's, which NVRTC 12.9 can parse.
next=$(python3 -c "import importlib.util as u; s = u.find_spec('sitecustomize'); print(s.origin if s else '')")
cat > /tmp/site12/sitecustomize.py <<PY
import ctypes
ctypes.CDLL("/tmp/root12/lib64/libnvrtc.so.12")
if "$next":
    exec(compile(open("$next").read(), "$next", "exec"))
PY
export PYTHONPATH=/tmp/site12:/tmp/site:$PWD CUTLASS_SPARSE_CACHE=/tmp/csd12/cs.db PYTHONUNBUFFERED=1
mkdir -m 700 -p /tmp/csd12
python3 -c "import cuda.bindings, cupy; from cutlass_sparse import env
from cupy_backends.cuda.libs import nvrtc
print('cuda-bindings', cuda.bindings.__version__, '| cupy', cupy.__version__, 'runtime', cupy.cuda.runtime.runtimeGetVersion(),
      'nvrtc', nvrtc.getVersion(), 'headers', cupy._environment.get_cuda_path())
print((cupy.arange(4, dtype=cupy.float16) * 2).sum())
print(env.toolchain_identity())" 2>&1 | tee $OUT/identity.log
t0=$(date +%s)
for family in sm80 sm90; do
  arch=sm_90; [ $family = sm90 ] && arch=sm_90a
  timeout ${WARM_TIMEOUT:-300} python3 -m tests.gpu_cases --family $family --arch $arch --jobs 16 >> $OUT/warm.log 2>&1
  echo "warm $family rc=$? $(( $(date +%s) - t0 ))s: $(grep -c '^compiled' $OUT/warm.log) compiled, $(grep -c '^failed' $OUT/warm.log) failed"
done
grep '^failed' $OUT/warm.log | head -3
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q --tb=short -p no:cacheprovider -n 4 --dist loadfile \
  ${TESTS:-tests/test_gpu_matmul.py tests/test_gpu_sm90.py tests/test_gpu_graphs.py} > $OUT/gpu_tests_cu12.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests_cu12.log | head -20; tail -1 $OUT/gpu_tests_cu12.log
