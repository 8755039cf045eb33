#!/usr/bin/env python3
"""Hunt the intermittent CUDA_ERROR_ILLEGAL_INSTRUCTION (sessions 32 and 34; GPU machine).

Repeats, for a given number of seconds, what the faulting test did: a tail twin range's first
eager calls (the twin and the persistent kernel of one range of N, with the build-ahead of the
range on the side stream), each result checked against dense. Before each round it forgets what
makes those calls cheap (the eager entries, the plans, the host copies of Params), so every round
runs the setups, the from-device launches, the build-ahead and the first by-value launches again.
Several processes at once (as the GPU tests' four workers) share the GPU.

Prints one line per process: rounds, calls, and the first error (its round and call) if any;
exit status 3 on a CUDA error, 1 on a wrong result.
Run from the repository root: python scripts/device/stress_first_calls.py [--seconds 90]"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def forget() -> None:
    """What a new process would not have: eager entries, plans, host copies of Params (not the
    pointer maps or descriptor templates: those are per kernel and device, made once)."""
    from cutlass_sparse.api import eager
    from cutlass_sparse.launch import sm90_params
    from cutlass_sparse.plan import plans

    eager.clear()
    plans.clear()
    with sm90_params._lock:   # as an eviction does: a copy still landing keeps its pinned memory
        sm90_params._in_flight.extend(t._copy for t in sm90_params._templates.values() if t._copy is not None)
        sm90_params._templates.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    import cupy

    import cutlass_sparse as cs
    import gpu_cases
    from test_gpu_epilogue_split_k import expect
    from test_gpu_matmul import TOLERANCE, random_operands

    from cutlass_sparse import reference

    m, k = gpu_cases.TAIL_TWIN_M, gpu_cases.TAIL_TWIN_K
    twin, persistent = gpu_cases.TAIL_TWIN_N, gpu_cases.TAIL_PERSISTENT_N
    operands = {dtype: random_operands(m, twin, k, dtype, "row", seed=84, family="sm90") for dtype in ("bf16", "f16")}
    refs = {}
    rounds = calls = 0
    t0 = time.perf_counter()
    where = ""
    try:
        while time.perf_counter() - t0 < args.seconds:
            forget()
            for dtype, (w, sw, x) in operands.items():
                for n in (twin, persistent, twin - 8, persistent - 8, twin):
                    where = f"round {rounds} {dtype} n {n}"
                    xn = cupy.ascontiguousarray(x[:, :n])   # new pointers each call
                    y = cs.matmul(sw, xn)
                    calls += 1
                    ref = refs.get((dtype, n))
                    if ref is None:
                        ref = refs[(dtype, n)] = expect(w, xn)
                    err = reference.relative_error(y, ref)   # synchronizes
                    if err > TOLERANCE[dtype]:
                        print(f"{args.tag} WRONG at {where}: relative error {err:.3e} after {calls} calls", flush=True)
                        return 1
            rounds += 1
    except Exception as error:   # a CUDA error: where it surfaced
        from cutlass_sparse.launch import sm90_params

        print(f"{args.tag} ERROR at {where} after {rounds} rounds, {calls} calls: {type(error).__name__}: {error}; "
              f"{sm90_params.refused} host Params refused as unencoded before it", flush=True)
        return 3
    from cutlass_sparse.launch import sm90_params

    print(f"{args.tag} ok: {rounds} rounds, {calls} calls in {time.perf_counter() - t0:.0f} s; "
          f"{sm90_params.refused} host Params refused as unencoded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
