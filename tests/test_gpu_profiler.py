"""The profiler on the GPU: picks a verified winner, records it, a second process uses it
without profiling, and the heuristic's own choice was among the timed candidates (so
the winner is never slower than it, as measured in the same run). Marked gpu."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cutlass_sparse as cs
from cutlass_sparse.build import cache
from cutlass_sparse import env
from cutlass_sparse.describe import selection
from cutlass_sparse.plan import records as profiler
from cutlass_sparse.profiler.tune import format_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gpu_matmul import check, random_operands  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent

SECOND_PROCESS = """
import sys, cupy
import cutlass_sparse as cs
from cutlass_sparse.profiler import tune as profiler
def refuse(*args, **kwargs):
    raise AssertionError("profiled again")
profiler.tune = refuse
m, n, k = (int(v) for v in sys.argv[1:4])
rng = cupy.random.default_rng(0)
w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
info = {}
y = cs.matmul(cs.compress(w, layout=sys.argv[4]), x, info=info)
ref = w.astype(cupy.float32) @ x.astype(cupy.float32)
err = float(cupy.linalg.norm(y.astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
print(info["config"], info.get("split_k", 1), err)
"""


@pytest.mark.parametrize("family,shape", [("sm80", (512, 16, 1024)), ("sm80", (256, 256, 256)),
                                          ("sm90", (1024, 16, 1024))])
def test_profiler_records_a_winner_that_a_second_process_uses(family, shape, tmp_path, monkeypatch):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    db = tmp_path / "tuned.db"
    if env.cache_path().exists():   # the compiled kernels (no compiling here); force=True re-profiles
        cache.KernelCache(db).merge_from(env.cache_path())
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(db))
    m, n, k = shape
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=0, family=family)
    winner, rows = cs.tune(sw, x, force=True, jobs=16)
    ok = [r for r in rows if r.ms is not None]
    assert ok and rows[0].choice == winner and rows[0].ms == min(r.ms for r in ok)
    # the heuristic's own choice was timed in the same run, so the winner cannot be slower
    if family == "sm80":
        default = profiler.Choice("sm80", selection.choose_tile("sm80", sw.padded_shape[0], n, k, 132))
    else:
        default = profiler.Choice("sm90", *selection.choose_sm90(m, n, k, 132))
    default_rows = [r for r in ok if r.choice == default]
    assert default_rows and rows[0].ms <= default_rows[0].ms
    print(format_table(rows))

    info = {}
    check(cs.matmul(sw, x, info=info), w, x, "f16")     # this process: the recorded winner
    assert info.get("split_k", 1) == winner.split_k

    child_env = dict(os.environ, CUTLASS_SPARSE_CACHE=str(db),
                     PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(m), str(n), str(k), family], env=child_env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    name, split, err = done.stdout.split()
    assert name == info["config"] and int(split) == winner.split_k and float(err) < 2e-2
