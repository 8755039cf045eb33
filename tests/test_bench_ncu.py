"""bench --ncu (cli/bench_ncu.py), without a GPU: which rows it profiles, the ncu command
line (the row's own kernel, by exact name), and the figures read from Nsight Compute's
report, on the reports recorded on the H200 in session 24 (docs/ncu_h200_session24.log)."""
import argparse
import os
from pathlib import Path

import pytest

from cutlass_sparse.cli import bench, bench_ncu

ROOT = Path(__file__).resolve().parent.parent
REPORTS = (ROOT / "docs" / "ncu_h200_session24.log").read_text().split("=== ncu ")[1:]
DECODE = "cutlass3x_sm90_sptensorop_spgemm_f16_f16_f32_f16_f16_64x16x256_4x1x1_0_ttt_align8_warpspecialized_pingpong_epi_tma_inflight_noc"


def _row(m, n, k, dtype="f16", config=DECODE):
    return {"m": m, "n": n, "k": k, "dtype": dtype, "config": config}


def test_the_figures_come_from_the_report():
    decode, *_, large = (bench_ncu.parse(text) for text in REPORTS)
    assert decode == {"dram_pct": 37.59, "sm_pct": 8.78, "memory_pct": 37.59, "ncu_duration_us": 10.56}
    assert large["sm_pct"] == 76.84 and large["dram_pct"] == 21.45
    assert large["ncu_duration_us"] == pytest.approx(1040.0)   # reported in ms
    assert bench_ncu.parse("no report here") == {}


def test_the_rows_issue_13_asks_for():
    assert bench_ncu.wanted(_row(4096, 16, 4096)) and bench_ncu.wanted(_row(4096, 128, 4096))
    assert bench_ncu.wanted(_row(8192, 8192, 8192, "bf16"))
    assert not bench_ncu.wanted(_row(4096, 4096, 4096)) and not bench_ncu.wanted(_row(4096, 512, 4096))
    assert not bench_ncu.wanted(_row(4096, 16, 4096, "e4m3"))   # `cutlass-sparse run` takes 16-bit types


def test_ncu_profiles_the_rows_own_kernel_in_a_run_of_its_shape():
    argv = bench_ncu.command(_row(4096, 16, 4096), "ncu")
    assert argv[argv.index("--kernel-name") + 1] == DECODE   # exact: not the setup entry
    assert argv[argv.index("--config") + 1] == DECODE        # and the run uses that kernel
    run = argv.index("-m")
    assert argv[run:run + 3] == ["-m", "cutlass_sparse.cli", "run"]
    assert argv[argv.index("--m") + 1: argv.index("--m") + 6] == ["4096", "--n", "16", "--k", "4096"]


def test_measure_runs_ncu_and_reads_its_report(tmp_path, monkeypatch):
    report = tmp_path / "report.txt"
    report.write_text(REPORTS[0])
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat {report}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    assert bench_ncu.measure(_row(4096, 16, 4096))["dram_pct"] == 37.59
    fake.write_text("#!/bin/sh\necho '==PROF== No kernels were profiled.'\nexit 0\n")
    error = bench_ncu.measure(_row(4096, 16, 4096))["ncu_error"]
    assert error.startswith(f"no launch of {DECODE} profiled (rc 0)") and "No kernels were profiled" in error


def test_without_ncu_each_row_says_so(monkeypatch, capsys):
    monkeypatch.setattr(bench_ncu.shutil, "which", lambda name: None)
    rows = [_row(4096, 16, 4096), _row(4096, 4096, 4096)]
    bench_ncu.report(rows, bench.kernel_label)
    assert rows[0]["ncu_error"] == "ncu is not on PATH" and "ncu_error" not in rows[1]
    assert "ncu is not on PATH" in capsys.readouterr().out


def test_bench_takes_the_flag():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert parser.parse_args(["--ncu"]).ncu and not parser.parse_args([]).ncu
