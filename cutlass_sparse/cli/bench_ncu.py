"""bench --ncu: what Nsight Compute measures for the kernel a bench row ran (issue 13: DRAM and
SM throughput at the decode rows and at 8192^3).

Nsight Compute profiles another process, so each row runs again as `cutlass-sparse run` with
the row's own kernel (--config, the name the bench recorded) under `ncu`, after the bench's
timings: profiling replays the kernel with its clocks locked, so its duration is longer than
the bench's and is reported only beside the throughputs.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

# Nsight Compute's SpeedOfLight section: our name -> the line's label
METRICS = {"dram_pct": "DRAM Throughput", "sm_pct": r"Compute \(SM\) Throughput", "memory_pct": "Memory Throughput"}
_DURATION = re.compile(r"^\s+Duration\s+(ns|us|ms|s)\s+([\d.,]+)\s*$", re.MULTILINE)
_MICROSECONDS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# the run's first launches are left out (its first call, its check): a steady launch is
# profiled (scripts/device/gpu_session.sh's NCU runs profiled the same way)
LAUNCH_SKIP = 3


def wanted(row: dict) -> bool:
    """The rows issue 13 asks figures for: decode and small batches (n <= 128) and 8192^3,
    16-bit types (what `cutlass-sparse run` takes)."""
    return row["dtype"] in ("f16", "bf16") and (row["n"] <= 128 or (row["m"], row["n"], row["k"]) == (8192,) * 3)


def command(row: dict, ncu: str = "ncu") -> list[str]:
    """ncu over one `cutlass-sparse run` of the row's shape with the row's kernel, profiling
    that kernel's launch (exact name: not the setup entry, not the compressor)."""
    return [ncu, "--target-processes", "all", "--kernel-name", row["config"], "--launch-skip", str(LAUNCH_SKIP),
            "--launch-count", "1", "--section", "SpeedOfLight",
            sys.executable, "-m", "cutlass_sparse.cli", "run", "--m", str(row["m"]), "--n", str(row["n"]),
            "--k", str(row["k"]), "--dtype", row["dtype"], "--config", row["config"]]


def parse(text: str) -> dict:
    """The figures of one profiled launch from ncu's report text ({} if it has none)."""
    found = {}
    for key, label in METRICS.items():
        match = re.search(rf"^\s+{label}\s+%\s+([\d.,]+)\s*$", text, re.MULTILINE)
        if match:
            found[key] = float(match[1].replace(",", ""))
    duration = _DURATION.search(text)
    if duration:
        found["ncu_duration_us"] = float(duration[2].replace(",", "")) * _MICROSECONDS[duration[1]]
    return found


def measure(row: dict, timeout: float = 240.0) -> dict:
    """The row's figures, or {"ncu_error": why} (no ncu, a timeout, no launch profiled)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"ncu_error": "ncu is not on PATH"}
    try:
        done = subprocess.run(command(row, ncu), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ncu_error": f"ncu ran past {timeout:.0f} s"}
    found = parse(done.stdout)
    if not found:
        tail = (done.stdout + done.stderr).strip().splitlines()
        return {"ncu_error": f"no launch of {row['config']} profiled (rc {done.returncode}): "
                             f"{tail[-1][:160] if tail else 'no output'}"}
    return found


def report(rows: list[dict], label) -> None:
    """Measure the wanted rows (in place) and print their figures."""
    chosen = [r for r in rows if wanted(r)]
    if not chosen:
        return
    print(f"\nNsight Compute (SpeedOfLight; duration under the profiler):\n{'dtype':5} {'m':>6} {'n':>6} {'k':>6}  "
          f"{'DRAM %':>7} {'SM %':>7} {'mem %':>7} {'us':>8}  kernel")
    for row in chosen:
        row.update(measure(row))
        if "ncu_error" in row:
            print(f"{row['dtype']:5} {row['m']:6} {row['n']:6} {row['k']:6}  {row['ncu_error']}", flush=True)
            continue
        figures = "".join(f" {row.get(key, float('nan')):7.1f}" for key in METRICS)
        print(f"{row['dtype']:5} {row['m']:6} {row['n']:6} {row['k']:6} {figures} "
              f"{row.get('ncu_duration_us', float('nan')):8.2f}  {label(row['config'])}", flush=True)
