"""A serving node as a fleet runs one, on the GPU: a HOME where CuPy cannot make its kernel
cache (a read-only root), the kernel cache shipped read-only (`cache merge --ship`: mode 0444
in a 0555 directory) and compiling forbidden. torch calls compress a weight and multiply; every
result is checked against dense, every kernel comes from the shipped file, and CuPy's own
kernels go to the private directory `import cutlass_sparse` gives it. Marked gpu."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent

# test_gpu_torch's sm90 calls (their kernels are in the GPU tests' cache): matmul, a biased
# linear with relu at an odd token count, a plan.
CALLS = r"""
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as said:
    import torch
    import cutlass_sparse as cs
    from cutlass_sparse.build import kernels
    g = torch.Generator(device="cuda").manual_seed(1)
    w = cs.prune_2to4(torch.randn(256, 512, device="cuda", generator=g).half())
    sw = cs.compress(w, layout="sm90")
    x = torch.randn(512, 48, device="cuda", generator=g).half()
    tokens = torch.randn(7, 512, device="cuda", generator=g).half()
    bias = torch.randn(256, device="cuda", generator=g).half()
    err = lambda y, ref: float((y.float() - ref).norm() / ref.norm())
    errors = [err(cs.matmul(sw, x), w.float() @ x.float()),
              err(cs.linear(tokens, sw, bias=bias, activation="relu"),
                  torch.relu(tokens.float() @ w.float().T + bias.float())),
              err(cs.plan(sw, x)(x), w.float() @ x.float())]
    torch.cuda.synchronize()
print(json.dumps({"errors": errors, "kernels": sorted({k.config.name for k in kernels._memo.values()}),
                  "from_cache": [k.from_cache for k in kernels._memo.values()],
                  "warnings": [str(w.message) for w in said]}))
"""


def _run(environ: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CALLS], env=environ, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_read_only_node_serves_torch_calls_from_a_shipped_cache(tmp_path, shared_cache_path):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    base = {k: v for k, v in os.environ.items()
            if k not in ("CUPY_CACHE_DIR", "CUTLASS_SPARSE_NO_COMPILE", "CUTLASS_SPARSE_CACHE_READONLY")}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    # the build machine: the session's cache gets the calls' kernels (compiled if it lacks them)
    built = _run({**base, "CUTLASS_SPARSE_CACHE": str(shared_cache_path)})
    assert max(built["errors"]) < 2e-2, built
    shipped_dir = tmp_path / "fleet"
    shipped_dir.mkdir(mode=0o755)
    merged = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "merge", "--ship", "--path",
                             str(shipped_dir / "fleet.db"), str(shared_cache_path)],
                            env=base, capture_output=True, text=True, timeout=600)
    assert merged.returncode == 0, merged.stderr
    shipped_dir.chmod(0o555)
    # the serving node: CuPy's ~/.cupy cannot be made (a file stands there: root cannot either)
    home, temp = tmp_path / "home", tmp_path / "temp"
    home.mkdir()
    temp.mkdir()
    (home / ".cupy").write_text("")
    try:
        served = _run({**base, "HOME": str(home), "TMPDIR": str(temp), "XDG_CACHE_HOME": str(home / "none"),
                       "CUTLASS_SPARSE_CACHE": str(shipped_dir / "fleet.db"), "CUTLASS_SPARSE_NO_COMPILE": "1"})
    finally:
        shipped_dir.chmod(0o755)
    assert max(served["errors"]) < 2e-2, served
    assert served["kernels"] == built["kernels"] and all(served["from_cache"]), served   # no compile, no stand-in
    assert (shipped_dir / "fleet.db").stat().st_mode & 0o777 == 0o444
    ours = [w for w in served["warnings"] if "CuPy cannot create" not in w
            and any(word in w.lower() for word in ("compil", "stand", "cache", "kernel"))]
    assert ours == [], served["warnings"]   # no compile, no stand-in, no cache trouble (others' warnings aside)
    assert any("CuPy cannot create" in w for w in served["warnings"]), served["warnings"]
    cupy_dir = temp / f"cutlass_sparse-{os.geteuid()}" / "cupy"
    compiled_by_cupy = sorted(p.name for p in cupy_dir.iterdir())
    print(f"CuPy compiled {len(compiled_by_cupy)} kernel(s) on the serving node: {compiled_by_cupy}")
    assert compiled_by_cupy, "CuPy compiled nothing into the private directory"
