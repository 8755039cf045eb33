"""scripts/run_gemm.py (`cutlass-sparse run`) without a GPU: --emit-only, and compile-only warm-up exiting 0.
Bad command lines: tests/test_cli_errors.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutlass_sparse import reference

ROOT = Path(__file__).resolve().parent.parent


def run(args, tmp_path):
    env = dict(os.environ, CUTLASS_SPARSE_CACHE=str(tmp_path / "cli.db"))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "run_gemm.py"), *args],
                          env=env, capture_output=True, text=True)


def test_emit_only_writes_the_kernel_source(tmp_path):
    out = tmp_path / "k.cu"
    result = run(["--m", "256", "--n", "64", "--k", "128", "--layout-b", "col", "--emit-only",
                  "--emit-path", str(out)], tmp_path)
    assert result.returncode == 0, result.stderr
    source = out.read_text()
    name = result.stdout.split(":")[0]
    assert name.startswith("cutlass_tensorop_f16_s16832spgemm_f16_") and "_tn_" in name
    assert 'extern "C" __global__' in source and name in source and "DefaultGemmSparseUniversal" in source


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_without_gpu_compiles_for_arch_and_exits_zero(tmp_path):
    args = ["--m", "100", "--n", "48", "--k", "64", "--arch", "sm_86"]
    first = run(args, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "no GPU found" in first.stdout and "compiled in" in first.stdout and "sm_86" in first.stdout
    second = run(args, tmp_path)
    assert second.returncode == 0 and "kernel        cache" in second.stdout


def test_unknown_config_name_fails_cleanly(tmp_path):
    result = run(["--m", "64", "--n", "64", "--k", "64", "--config", "nope", "--emit-only"], tmp_path)
    assert result.returncode == 2 and "no configuration named 'nope'" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
