#!/usr/bin/env python3
"""Why 16384^3 loses more to cuSPARSELt in the bench's long bursts (20 calls of 9 ms) than in
short ones (5 calls): ours and cuSPARSELt timed alternately at each burst length while
nvidia-smi samples the SM clock, the power draw and the throttle reasons every 50 ms; each
timing's window gets the mean clock and power of the samples inside it. Both results are
checked against the dense one first (GPU machine).

    python scripts/device/power_bursts.py [--shape 16384x16384x16384] [--rounds 3]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.cli.bench import cusparselt  # noqa: E402

FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
BURSTS = (5, 20)        # calls per timing: sweep_raster.py's and the bench's
REPLAYS = 9


def samples(path: Path) -> list[tuple[float, float, float, float, str]]:
    """(unix time, SM MHz, W, deg C, throttle reasons) per nvidia-smi line."""
    found = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            found.append((when, float(parts[1].split()[0]), float(parts[2].split()[0]), float(parts[3]), parts[4]))
        except ValueError:
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="16384x16384x16384")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    m, n, k = map(int, args.shape.split("x"))
    rng = cupy.random.default_rng(0)
    w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
    x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    sw = cs.compress(w)
    ref = reference.to_float32(cupy.matmul(w, x))
    y = cs.matmul(sw, x)
    assert reference.relative_error(y, ref) < 2e-3
    peer, out = cusparselt(w, x)
    peer()
    assert reference.relative_error(cupy.from_dlpack(out), ref) < 2e-3
    del ref
    calls = {"ours": lambda: cs.matmul(sw, x, out=y), "cuSPARSELt": peer}
    log = Path(tempfile.mkstemp(suffix=".csv")[1])
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=log.open("w"), stderr=subprocess.DEVNULL)
    windows = []
    try:
        time.sleep(1.0)
        for _ in range(args.rounds):
            for burst in BURSTS:
                for name, call in calls.items():
                    start = time.time()
                    ms = reference.kernel_median_ms(call, burst, REPLAYS)
                    windows.append((name, burst, ms, start, time.time()))
        time.sleep(0.5)
    finally:
        smi.terminate()
        smi.wait()
    seen = samples(log)
    flops = 2.0 * m * n * k   # as scripts/bench.py counts (the dense product's)
    print(f"{m}x{n}x{k} f16, {args.rounds} rounds, {len(seen)} nvidia-smi samples at 50 ms")
    print(f"{'kernel':>11} {'calls':>5} {'ms/call':>8} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'C':>4}  throttle reasons")
    for name, burst, ms, start, stop in windows:
        inside = [s for s in seen if start <= s[0] <= stop]
        clock = statistics.mean(s[1] for s in inside) if inside else float("nan")
        power = statistics.mean(s[2] for s in inside) if inside else float("nan")
        temp = max((s[3] for s in inside), default=float("nan"))
        reasons = ",".join(sorted({s[4] for s in inside}))
        print(f"{name:>11} {burst:5d} {ms:8.3f} {flops / ms / 1e9:8.1f} {clock:7.0f} {power:6.0f} {temp:4.0f}  {reasons}")
    for burst in BURSTS:
        ours = statistics.median(w[2] for w in windows if w[0] == "ours" and w[1] == burst)
        theirs = statistics.median(w[2] for w in windows if w[0] == "cuSPARSELt" and w[1] == burst)
        print(f"{burst:2d} calls per timing: ours / cuSPARSELt {theirs / ours:.3f}x (median over rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
