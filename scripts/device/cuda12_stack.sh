#!/usr/bin/env bash
# The GPU tests on a real CUDA 12 stack on the device image (whose own Python stack is CUDA
# 13's): CuPy for CUDA 12 (cupy-cuda12x), cuBLAS 12, cuRAND 12, the CUDA 12.9 runtime,
# NVRTC 12.9 and the CUDA 12.9 header wheels, cuda-bindings 12.9; torch stays the image's.
# That stack is 386 MB compressed, more than one device call carries (64 MiB), so it
# travels in pieces, one call each, while the machine stays warm:
#   PIECE=1   copy the pieces carried in .x12p/ to /tmp/x12p/ and stop (calls 1..n)
# then a call carrying .cu12/ (README's recipe) and the last piece sets the stack up in a
# virtual environment, checks which libraries each package loaded, compiles the session's
# kernels with NVRTC 12.9 (STEPS=warm), and runs the GPU tests (STEPS=tests).
# Pieces: x12.tar.xz = site/ (cupy-cuda12x 14.2.0 unpacked; nvidia/cublas/lib (cublas
# 12.6.4.1), nvidia/curand/lib, nvidia/cuda_runtime/lib), split -b 58m, its SHA-256 in sha.
OUT=${OUT:-/tmp/cu12_out}; mkdir -p "$OUT" /tmp/x12p
cp .x12p/* /tmp/x12p/ 2>/dev/null
if [ -n "$PIECE" ]; then ls -la /tmp/x12p; exit 0; fi
V=/tmp/v12; SITE=$V/lib/$(python3 -c "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')")/site-packages
if [ ! -f $V/ready ]; then
  [ "$(cat /tmp/x12p/part.* | sha256sum | cut -c1-64)" = "$(cat /tmp/x12p/sha)" ] || { echo "pieces incomplete"; ls -la /tmp/x12p; exit 3; }
  system_sites=$(python3 -c "import site; print('\n'.join(site.getsitepackages()))")
  # a virtual environment by hand (what `python -m venv --without-pip` writes; the image
  # may lack the venv module): sys.prefix is $V, its one site directory $SITE
  py=$(python3 -c "import sys; print(sys._base_executable)")   # the image runs python from a venv
  mkdir -p $V/bin $SITE && ln -sf "$py" $V/bin/python || exit 1
  printf 'home = %s\ninclude-system-site-packages = false\n' "$(dirname "$py")" > $V/pyvenv.cfg
  mkdir -p /tmp/x12u && cat /tmp/x12p/part.* | xz -dc | tar xf - -C /tmp/x12u || exit 1
  tar xJf .cu12/cuda12.tar.xz -C /tmp || exit 1
  cp -a /tmp/x12u/site/. $SITE/ && cp -a /tmp/site12/. $SITE/ || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE .cu12/nvidia_cutlass-*.whl || exit 1
  # torch, numpy, pytest from the image: on sys.path (a .pth) but not among the site
  # directories cuda.pathfinder searches, so it never finds the image's nvidia/cu13
  echo "$system_sites" > $SITE/zz_image_site.pth
  touch $V/ready
fi
# NVRTC 12.9 sits outside site-packages (root12/lib64, beside CUDA 12.9's headers in
# root12/include); loaded first, it is what cuda.pathfinder hands cuda-bindings and CuPy,
# and CuPy takes its CUDA root (the headers of its own kernels) from its location. On
# PYTHONPATH: the image's Debian python has a sitecustomize of its own in the standard
# library's directory, ahead of any site directory.
mkdir -p $V/pre
next=$(python3 -c "import importlib.util as u; s = u.find_spec('sitecustomize'); print(s.origin if s else '')")
cat > $V/pre/sitecustomize.py <<PY
import ctypes
ctypes.CDLL("/tmp/root12/lib64/libnvrtc.so.12", mode=ctypes.RTLD_GLOBAL)
# cuda.pathfinder remembers its first answer: NVRTC 12.9 now, before the image's torch
# (a CUDA 13 build) loads NVRTC 13, which pathfinder would otherwise hand CuPy
from cuda.pathfinder import load_nvidia_dynamic_lib
load_nvidia_dynamic_lib("nvrtc")
if "$next":
    exec(compile(open("$next").read(), "$next", "exec"))
PY
export PATH=$V/bin:$PATH PYTHONPATH=$V/pre:$PWD CUTLASS_SPARSE_CACHE=/tmp/csd12/cs.db PYTHONUNBUFFERED=1
mkdir -m 700 -p /tmp/csd12
# a cache brought back by an earlier run, carried in a PIECE call of its own (it does not
# fit beside .cu12/ and the last piece): unpacked whole or not at all
if [ ! -f /tmp/csd12/cs.db ] && [ -f /tmp/x12p/cs12.db.gz ]; then
  gunzip -c /tmp/x12p/cs12.db.gz > /tmp/csd12/cs.db.part && mv /tmp/csd12/cs.db.part /tmp/csd12/cs.db
fi
t0=$(date +%s)
python - <<'PY' 2>&1 | tee -a $OUT/identity.log
import sys, cupy, numpy, cuda.bindings, ml_dtypes
from cupy_backends.cuda.libs import nvrtc
from cupy.cuda import cublas
import torch
from cutlass_sparse import env
a = cupy.random.standard_normal((256, 256), dtype=cupy.float32).astype(cupy.float16)
ref = a.get().astype(numpy.float32) @ a.get().astype(numpy.float32)
err = float(abs((a @ a).get().astype(numpy.float32) - ref).max() / abs(ref).max())
b = cupy.asarray(numpy.arange(8, dtype=ml_dtypes.bfloat16)) * 2
print("python", sys.executable, "| cupy", cupy.__version__, "runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "driver", cupy.cuda.runtime.driverGetVersion(), "| nvrtc", nvrtc.getVersion(),
      "| cublas", cublas.getVersion(cupy.cuda.device.get_cublas_handle()),
      "| cuda root", cupy.cuda.get_cuda_path(), "| cuda-bindings", cuda.bindings.__version__, "| torch", torch.__version__)
print("cupy fp16 matmul (cuBLAS) rel err", err, "| bf16 kernel", b.get().tolist()[:3])
print("loaded:", sorted({line.split()[-1] for line in open("/proc/self/maps")
                          if any(s in line for s in ("libcublas", "libcudart", "libnvrtc.so", "libcurand"))}))
print(env.toolchain_identity())
PY
if [[ " ${STEPS:-warm tests} " == *" warm "* ]]; then
  timeout ${WARM_TIMEOUT:-300} python -m tests.gpu_cases --family session --jobs 16 > $OUT/warm.log 2>&1
  echo "warm rc=$? $(( $(date +%s) - t0 ))s: $(grep -c '^cached' $OUT/warm.log) cached, $(grep -c '^compiled' $OUT/warm.log) compiled, $(grep -c '^failed' $OUT/warm.log) failed"
  grep '^failed' $OUT/warm.log | head -3   # (a warm step stopped by its timeout lists nothing: see the count)
  python -c "import sqlite3; print('cache entries:', sqlite3.connect('/tmp/csd12/cs.db').execute('select count(*) from kernels').fetchone()[0])"
  # the cache comes back (carry it as .x12p/cs12.db.gz on a fresh machine)
  python -c "import sqlite3; s=sqlite3.connect('/tmp/csd12/cs.db'); d=sqlite3.connect('/tmp/csd12/snap.db'); s.backup(d); d.close()"
  gzip -6 -c /tmp/csd12/snap.db | split -b 15m - $OUT/cs12.db.gz.part-; rm -f /tmp/csd12/snap.db
fi
if [[ " ${STEPS:-warm tests} " == *" tests "* ]]; then
  timeout ${TEST_TIMEOUT:-270} python -m pytest -m gpu -q --tb=short -p no:cacheprovider -n 4 --dist loadfile \
    -o faulthandler_timeout=150 ${TESTS:-tests} > $OUT/gpu_tests_cu12.log 2>&1
  echo "pytest rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests_cu12.log | head -30; tail -1 $OUT/gpu_tests_cu12.log
fi
