#!/usr/bin/env python3
"""What loading one sm90 kernel's module costs on the host (GPU machine). For a few cached
kernels (no compile: run after the warm step): the cubin as the cache holds it and the cubin as
the library loads it (build.cubin_trim), each load a fresh module, in turns. --files: cubins of
one kernel (variants of its symbol table, say) timed the same way.
Run from the repository root: python scripts/device/probe_module_load.py [--loads 9] [--files A B ...]"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# the 4096^3 default, the decode tile, a 4608-row prefill; an sm80 kernel (compiled for sm_90)
SHAPES = (("sm90", (4096, 4096, 4096)), ("sm90", (4096, 16, 4096)), ("sm90", (4608, 2048, 4096)),
          ("sm80", (4096, 4096, 4096)))


def time_loads(blobs: dict[str, bytes], entry: str, loads: int, setup: bool = True) -> None:
    """Median host ms of a module load (and its GEMM and setup entries' lookup) per variant."""
    import cupy

    times = {name: [] for name in blobs}
    kept = []   # an unload would time something else
    for turn in range(loads):
        for name in (list(blobs) if turn % 2 == 0 else list(blobs)[::-1]):   # the order reversed every other turn
            start = time.perf_counter()
            module = cupy.cuda.function.Module()
            module.load(blobs[name])
            module.get_function(entry)
            if setup:
                module.get_function(f"{entry}_setup")
            times[name].append((time.perf_counter() - start) * 1e3)
            kept.append(module)
    for name, blob in blobs.items():
        print(f"  {name}: {len(blob) / 1e6:.2f} MB, load median {statistics.median(times[name]):.2f} ms "
              f"({' '.join(f'{t:.1f}' for t in times[name])})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=9)
    parser.add_argument("--files", nargs="*", default=[])
    parser.add_argument("--entry", default="", help="--files: the GEMM entry's symbol (its _setup is looked up too)")
    args = parser.parse_args()
    import cupy

    from cutlass_sparse.build import cubin_trim, kernels
    from cutlass_sparse.describe import selection

    cupy.cuda.Device(0).synchronize()   # the context, before any timing
    if args.files:
        time_loads({Path(path).name: Path(path).read_bytes() for path in args.files}, args.entry, args.loads)
        return
    for family, (m, n, k) in SHAPES:
        config = selection.config_for_shape(m, n, k, "f16", "f16", "row", 132, family=family)
        compiled = kernels.get(config, "sm_90a" if family == "sm90" else "sm_90")
        print(f"{m}x{n}x{k} {config.name}:", flush=True)
        time_loads({"as cached": compiled.cubin, "trimmed": cubin_trim.without_unused_variables(compiled.cubin)},
                   compiled.symbol, args.loads, setup=family == "sm90")


if __name__ == "__main__":
    main()
