#!/usr/bin/env python3
"""Why 16384^3 loses more to cuSPARSELt in the bench's long bursts (20 calls of 9 ms) than in
short ones (5 calls): ours and cuSPARSELt timed alternately at each burst length while
nvidia-smi samples the SM clock, the power draw and the throttle reasons every 50 ms; each
timing's window gets the mean clock and power of the samples inside it. Every result is
checked against the dense one first (GPU machine). --tall adds the catalog's tile for the
largest problems (min_m, min_k) as a third contestant, named by config, or where the
library already picks it (16384^3 since session 28), the catalog's first tile (128x256x64
in flight, the pick before) as "wide".

    python scripts/device/power_bursts.py [--shape 16384x16384x16384] [--rounds 3] [--dtype bf16]
        [--bursts 5,20,100] [--tall]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.describe import dtypes  # noqa: E402
from sustained import library_pick, tall_rival  # noqa: E402
from cutlass_sparse.cli.bench import cusparselt  # noqa: E402

FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
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
    parser.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    parser.add_argument("--bursts", default="5,20", help="calls per timing: sweep_raster.py's and the bench's")
    parser.add_argument("--tall", action="store_true", help="and the catalog's tile for the largest problems")
    args = parser.parse_args()
    bursts = tuple(int(b) for b in args.bursts.split(","))
    m, n, k = map(int, args.shape.split("x"))
    rng = cupy.random.default_rng(0)
    np_dtype = dtypes.numpy_dtype(args.dtype)
    w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((m, k), dtype=cupy.float32), np_dtype))
    x = dtypes.from_float32(rng.standard_normal((k, n), dtype=cupy.float32), np_dtype)
    sw = cs.compress(w)
    ref = reference.to_float32(cupy.matmul(w, x))
    tolerance = 2e-3 if args.dtype == "f16" else 1.2e-2
    info = {}
    y = cs.matmul(sw, x, info=info)
    assert reference.relative_error(y, ref) < tolerance
    print(f"ours: {info['config']}")
    peer, out = cusparselt(w, x)
    peer()
    assert reference.relative_error(cupy.from_dlpack(out), ref) < tolerance
    calls = {"ours": lambda: cs.matmul(sw, x, out=y), "cuSPARSELt": peer}
    if args.tall:
        label, rival = tall_rival(args.dtype, library_pick(args.dtype, m, n, k).threadblock)
        y_rival = cs.matmul(sw, x, config=rival)
        assert reference.relative_error(y_rival, ref) < tolerance
        print(f"{label}: {rival.name}")
        calls[label] = lambda: cs.matmul(sw, x, out=y_rival, config=rival)
    del ref
    log = Path(tempfile.mkstemp(suffix=".csv")[1])
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=log.open("w"), stderr=subprocess.DEVNULL)
    windows = []
    try:
        time.sleep(1.0)
        for _ in range(args.rounds):
            for burst in bursts:
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
    print(f"{m}x{n}x{k} {args.dtype}, {args.rounds} rounds, {len(seen)} nvidia-smi samples at 50 ms")
    print(f"{'kernel':>11} {'calls':>5} {'ms/call':>8} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'C':>4}  throttle reasons")
    for name, burst, ms, start, stop in windows:
        inside = [s for s in seen if start <= s[0] <= stop]
        clock = statistics.mean(s[1] for s in inside) if inside else float("nan")
        power = statistics.mean(s[2] for s in inside) if inside else float("nan")
        temp = max((s[3] for s in inside), default=float("nan"))
        reasons = ",".join(sorted({s[4] for s in inside}))
        print(f"{name:>11} {burst:5d} {ms:8.3f} {flops / ms / 1e9:8.1f} {clock:7.0f} {power:6.0f} {temp:4.0f}  {reasons}")
    for burst in bursts:
        ms = {name: statistics.median(w[2] for w in windows if w[0] == name and w[1] == burst) for name in calls}
        rival = next((name for name in ("tall", "wide") if name in ms), None)
        print(f"{burst:3d} calls per timing: ours / cuSPARSELt {ms['cuSPARSELt'] / ms['ours']:.3f}x"
              + (f", {rival} / cuSPARSELt {ms['cuSPARSELt'] / ms[rival]:.3f}x, {rival} / ours "
                 f"{ms['ours'] / ms[rival]:.3f}x" if rival else "") + " (median over rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
