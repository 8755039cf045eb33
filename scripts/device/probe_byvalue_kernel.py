"""Kernel time of one sm90 GEMM launch with Params by value against the same launch reading
them from the setup's device buffer (what every call did before session 10): does a
kernel whose Params and TMA descriptors sit in parameter space start sooner? Same kernel,
same operands, alternated rounds; both results checked against dense.

    python scripts/device/probe_byvalue_kernel.py
"""
from __future__ import annotations

import cupy

import cutlass_sparse as cs
from cutlass_sparse import reference
from cutlass_sparse.launch import sm90

SHAPES = ((4096, 16, 4096), (14336, 16, 4096), (4096, 128, 4096), (8192, 8192, 8192))


def main() -> None:
    rng = cupy.random.default_rng(0)
    for m, n, k in SHAPES:
        w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = cs.compress(w)
        planned = cs.plan(sw, x)
        y = planned(x)
        cupy.cuda.Device().synchronize()   # the host copy of Params lands
        fam = planned.family_plan
        pointers = (sw.values.data.ptr, sw.metadata_for(fam.atom_k).data.ptr, x.data.ptr, y.data.ptr, y.data.ptr)
        by_buffer = fam._build(pointers, None)
        by_value = fam._from_host(pointers, sm90.NO_VECTORS, None)
        assert by_value is not None and by_value.params is None and by_buffer.params is not None
        want = reference.to_float32(w) @ reference.to_float32(x)
        errors = []
        for ready in (by_buffer, by_value):
            y.fill(0)
            fam.launch(ready)
            errors.append(reference.relative_error(y, want))
        times = {"buffer": [], "value": []}
        for _ in range(3):
            times["buffer"].append(reference.kernel_median_ms(lambda: fam.launch(by_buffer)) * 1e3)
            times["value"].append(reference.kernel_median_ms(lambda: fam.launch(by_value)) * 1e3)
        b, v = min(times["buffer"]), min(times["value"])
        print(f"{m}x{n}x{k} {fam.config.name[-60:]}: from the buffer {b:8.2f} us, by value {v:8.2f} us "
              f"({b / v:.3f}x); rel err {errors[0]:.1e} / {errors[1]:.1e}", flush=True)


if __name__ == "__main__":
    main()
