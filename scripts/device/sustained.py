#!/usr/bin/env python3
"""Sustained speed, as a training loop or a long prefill sees it: each contestant first runs
back to back for --heat seconds (the card reaches its power cap), then --windows timings of
about --window seconds each (median). Contestants: the library's pick, the same kernel
drained (where the pick keeps wgmma in flight), the catalog's tile for the largest problems
(256x192x64 drained, by config; where the pick is that tile, the catalog's first tile
instead), and cuSPARSELt; their order rotates each round. Every
result is checked against the dense one first (GPU machine; session 28).

    python scripts/device/sustained.py [--rows f16:16384x16384x16384,bf16:8192x8192x8192] [--rounds 2]
    python scripts/device/sustained.py --compile-only [--jobs 2]     # CPU machine: the kernels
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.describe import catalog, dtypes  # noqa: E402
from sweep_8bit_picks import library_pick  # noqa: E402

ROWS = ("f16:16384x16384x16384,bf16:16384x16384x16384,f16:8192x8192x8192,bf16:8192x8192x8192,"
        "f16:12288x12288x12288,f16:16384x8192x16384,f16:4096x4096x4096,f16:14336x4096x4096,"
        "f16:8192x4096x28672,f16:28672x512x8192")
TOLERANCE = {"f16": 2e-3, "bf16": 1.2e-2}


def tall_rival(dtype, pick_threadblock) -> tuple[str, object]:
    """("tall", the catalog's tile for the largest problems), or where the pick already is
    that tile, ("wide", the catalog's first tile: 128x256x64 in flight, the pick before);
    row-major x and D, no C (power_bursts.py --tall uses it too)."""
    fam = catalog.load("sm90")
    tall = fam.mk_bounds[0][0]
    label, tile = ("tall", tall) if pick_threadblock != tall[0] else ("wide", fam.tiles[0])
    return label, fam.config(tile, dtype, dtype, "row", 8, 8, reads_c=False)


def rivals(dtype, m, n, k) -> dict:
    """name -> config for our kernels at this row (None: the library's own call): the pick,
    drained where it keeps wgmma in flight, and tall_rival."""
    pick = library_pick(dtype, m, n, k)
    found = {"pick": None}
    if pick.mma_in_flight:
        found["drained"] = dataclasses.replace(pick, mma_in_flight=False)
    label, rival = tall_rival(dtype, pick.threadblock)
    found[label] = rival
    return found


def checked_calls(rng, dtype, m, n, k, configs: dict) -> tuple[dict, dict]:
    """(name -> call, name -> kernel name) for a random 2:4 weight and x of this shape: each
    config (None: the library's own choice) and cuSPARSELt where torch has it, every result
    checked against dense first."""
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from cutlass_sparse.cli.bench import cusparselt

    np_dtype = dtypes.numpy_dtype(dtype)
    w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((m, k), dtype=cupy.float32), np_dtype))
    x = dtypes.from_float32(rng.standard_normal((k, n), dtype=cupy.float32), np_dtype)
    sw = cs.compress(w)
    ref = reference.to_float32(cupy.matmul(w, x))
    calls, names = {}, {}
    for name, config in configs.items():
        y = cupy.empty((m, n), np_dtype)
        info = {}
        cs.matmul(sw, x, out=y, config=config, info=info)
        err = reference.relative_error(y, ref)
        assert err <= TOLERANCE[dtype], (name, info["config"], err)
        calls[name] = (lambda y=y, config=config: cs.matmul(sw, x, out=y, config=config))
        names[name] = info["config"]
    peer = cusparselt(w, x)
    if peer is not None:
        calls["cslt"], out = peer
        calls["cslt"]()
        assert reference.relative_error(cupy.from_dlpack(out), ref) <= TOLERANCE[dtype]
    return calls, names


def sustained_ms(calls: dict, rounds: int, heat: float, window: float, windows: int) -> dict:
    """name -> one ms per call for each round: each contestant runs back to back for `heat`
    seconds, then `windows` timings of about `window` seconds (median); the order rotates
    each round."""
    import cupy

    from cutlass_sparse import reference

    timed = {name: [] for name in calls}
    order = list(calls)
    for round_ in range(rounds):
        for i in range(len(order)):
            name = order[(round_ + i) % len(order)]
            call = calls[name]
            per_call = reference.kernel_median_ms(call, calls=3, replays=1)
            count = max(3, round(window * 1e3 / per_call))
            heat_until = time.time() + heat
            while time.time() < heat_until:
                for _ in range(count):
                    call()
                cupy.cuda.Device().synchronize()
            timed[name].append(reference.kernel_median_ms(call, calls=count, replays=windows))
    return timed


def parse_rows(text):
    return [(d, tuple(map(int, s.split("x")))) for d, s in (item.split(":") for item in text.split(","))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=ROWS, help="dtype:MxNxK, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--heat", type=float, default=1.5, help="seconds of calls before each contestant's timings")
    parser.add_argument("--window", type=float, default=0.4, help="seconds per timing")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    rows = parse_rows(args.rows)
    if args.compile_only:
        items = {c.name: (c, "sm_90a") for dtype, (m, n, k) in rows
                 for c in [library_pick(dtype, m, n, k)] + [c for c in rivals(dtype, m, n, k).values() if c]}
        for name, _, status, seconds in warmup.compile_all(list(items.values()), None, args.jobs):
            print(f"{status[:200]:12} {seconds:6.1f} s {name}", flush=True)
        return 0

    import cupy

    rng = cupy.random.default_rng(0)
    print(f"heat {args.heat} s, then {args.windows} timings of ~{args.window} s each (median), "
          f"{args.rounds} rounds, order rotating", flush=True)
    for dtype, (m, n, k) in rows:
        calls, names = checked_calls(rng, dtype, m, n, k, rivals(dtype, m, n, k))
        flops = 2.0 * m * n * k
        timed = sustained_ms(calls, args.rounds, args.heat, args.window, args.windows)
        ms = {name: statistics.median(t) for name, t in timed.items()}
        print(f"\n{dtype} {m}x{n}x{k}", flush=True)
        for name in calls:
            vs = f"  /cslt {ms['cslt'] / ms[name]:.3f}" if "cslt" in ms else ""
            print(f"  {name:8} {flops / ms[name] / 1e9:7.1f} TFLOP/s{vs}  rounds "
                  + " ".join(f"{flops / t / 1e9:.0f}" for t in timed[name])
                  + (f"  {names[name].split('_f32_')[1][:60]}" if name in names else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
