#!/usr/bin/env python3
"""What loading one sm90 kernel's module costs on the host (GPU machine): the first load of
its cubin in the process, and loads after it (a second copy of the module: until session 36
each sm90 kernel loaded three, launch.setup_order's copies). Kernels from the cache (no compile:
run after the warm step). Prints the cubin's size and the median of the loads after the first.
--files: cubins of one kernel (variants of its symbol table, say) loaded in turns, each load a
fresh module, with the medians per file.
Run from the repository root: python scripts/device/probe_module_load.py [--loads 5] [--files A B ...]"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# the 4096^3 default, the decode tile, a 4608-row prefill
SHAPES = ((4096, 4096, 4096), (4096, 16, 4096), (4608, 2048, 4096))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--entry", default="", help="--files: the GEMM entry's symbol (its _setup is looked up too)")
    args = parser.parse_args()
    import cupy

    from cutlass_sparse.build import kernels
    from cutlass_sparse.describe import selection

    cupy.cuda.Device(0).synchronize()   # the context, before any timing
    if args.files:
        time_files(args.files, args.entry, args.loads)
        return
    for m, n, k in SHAPES:
        config = selection.config_for_shape(m, n, k, "f16", "f16", "row", 132, family="sm90")
        compiled = kernels.get(config, "sm_90a")
        times, modules = [], []
        for _ in range(args.loads):
            start = time.perf_counter()
            module = cupy.cuda.function.Module()
            module.load(compiled.cubin)
            module.get_function(f"{compiled.symbol}_setup")
            times.append((time.perf_counter() - start) * 1e3)
            modules.append(module)   # kept: an unload would time something else
        print(f"{m}x{n}x{k} {config.name}: cubin {len(compiled.cubin) / 1e6:.2f} MB; first load "
              f"{times[0]:.2f} ms, later loads median {statistics.median(times[1:]):.2f} ms "
              f"({' '.join(f'{t:.2f}' for t in times)})", flush=True)


def time_files(paths, entry: str, loads: int) -> None:
    import cupy

    blobs = {path: Path(path).read_bytes() for path in paths}
    times = {path: [] for path in paths}
    kept = []
    for turn in range(loads):
        for path in (paths if turn % 2 == 0 else paths[::-1]):   # turns, the order reversed every other one
            start = time.perf_counter()
            module = cupy.cuda.function.Module()
            module.load(blobs[path])
            module.get_function(entry)
            module.get_function(f"{entry}_setup")
            times[path].append((time.perf_counter() - start) * 1e3)
            kept.append(module)
    for path in paths:
        print(f"{Path(path).name}: {len(blobs[path]) / 1e6:.2f} MB, load median {statistics.median(times[path]):.2f} ms "
              f"({' '.join(f'{t:.1f}' for t in times[path])})", flush=True)


if __name__ == "__main__":
    main()
