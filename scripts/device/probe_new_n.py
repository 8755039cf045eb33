#!/usr/bin/env python3
"""A new N's host time (GPU machine): cs.linear's eager path for N = 2..512 after a
warm-up pass over the ranges (as scripts/bench_eager.py), median per call, three
rounds; how many calls built Params with a setup launch (Sm90Plan._build) instead of
patching a host copy; and the steps of one call (Sm90Plan.ready's replayed, a clock
around each)."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager, eager_keys, interop, matmul as api_matmul  # noqa: E402
from cutlass_sparse.launch import sm90, sm90_params  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402


counts = {"_build": 0, "_from_host": 0}


def counted(name):
    original = getattr(sm90.Sm90Plan, name)

    def wrapper(self, *args, **kwargs):
        counts[name] += 1
        return original(self, *args, **kwargs)
    setattr(sm90.Sm90Plan, name, wrapper)


def reset():
    eager.clear(), plans.clear()
    sm90_params._templates.clear()


def warm_up(sw, xs):
    for n in sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)}):
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()
    time.sleep(0.05)


def spin(ms: float) -> None:
    """Keep the GPU busy for about `ms` on torch's current stream (so launches queue up)."""
    import cupy

    from cutlass_sparse import reference

    kernel = cupy.RawKernel(reference._SPIN_SOURCE, "cutlass_sparse_spin")
    rate_khz = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]
    kernel((1,), (1,), (cupy.int64(int(ms * rate_khz)),))


def loop(sw, xs, busy: bool = False):
    times = []
    if busy:
        spin(40.0)
    for n in range(2, 513):
        start = time.perf_counter()
        cs.linear(xs[n], sw)
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


NO = (0, 0, 0)


def main():
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in range(1, 513)}
    for n in xs:   # torch's allocator has seen every output size
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
    counted("_build"), counted("_from_host")
    print("cs.linear, new N 2..512 (median host us per call), the GPU idle or busy (a spin kernel ahead):")
    for name in ("idle", "busy") * 2:
        reset()
        warm_up(sw, xs)
        for key in counts:
            counts[key] = 0
        median = loop(sw, xs, busy=name == "busy")
        print(f"  {name:14s} {median:7.1f}   setup launches {counts['_build']}, host copies {counts['_from_host']}")
        for n in (3, 97, 500):
            ref = xs[n].float() @ w.float().T
            err = float((cs.linear(xs[n], sw).float() - ref).norm() / ref.norm())
            assert err < 2e-2, (name, n, err)

    reset()
    warm_up(sw, xs)
    spin(40.0)   # the steps with the GPU busy, as in scripts/bench_eager.py
    options = api_matmul._activation_options("identity")
    steps = {name: [] for name in ("linear_key", "lookup", "new_out", "torch_stream", "ready key", "template",
                                   "arrived", "HostParams", "record", "Ready", "keep",
                                   "launch", "total")}
    for n in range(2, 513):
        x = xs[n]
        t = [time.perf_counter()]
        found = eager_keys.linear_key(x, sw, options)
        t.append(time.perf_counter())
        entry = eager.lookup(found[0])
        t.append(time.perf_counter())
        y = entry.linear_out(x, found[1])
        t.append(time.perf_counter())
        stream = interop.torch_stream(0)
        t.append(time.perf_counter())
        plan = entry.plan
        pointers = (sw.values.data.ptr, sw.metadata_for(plan.atom_k, stream).data.ptr, x.data_ptr(), y.data_ptr(),
                    y.data_ptr())
        t.append(time.perf_counter())
        nulls = plan._nulls(pointers, NO)
        made = plan._templates.get(nulls) or sm90_params.template(plan._host_key(pointers, NO))
        offsets = sm90_params.pointer_maps.get((plan.compiled.key, plan.problem.device_id))
        t.append(time.perf_counter())
        params_bytes = made.arrived()
        t.append(time.perf_counter())
        host = plan._host_params[nulls] = sm90_params.HostParams(params_bytes, offsets)
        t.append(time.perf_counter())
        address, record = host.record(pointers + NO + (0,))   # no workspace (a twin kernel maps one)
        t.append(time.perf_counter())
        ready = sm90.Ready(address, plan._prepared(pointers).grid, (record,))
        t.append(time.perf_counter())
        with plan._lock:
            plan._readies[pointers + (0,) + NO] = ready
        t.append(time.perf_counter())
        plan.launch(ready, stream)
        t.append(time.perf_counter())
        for name, a, b in zip(steps, t, t[1:]):
            steps[name].append((b - a) * 1e6)
        steps["total"].append((t[-1] - t[0]) * 1e6)
    torch.cuda.synchronize()
    print("the steps of a new N's call, one by one (median us):")
    for name, values in steps.items():
        print(f"  {name:14s} {statistics.median(values):6.2f}")


if __name__ == "__main__":
    main()
