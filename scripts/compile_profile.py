"""Measure one sm90 kernel's NVRTC compile: wall time, peak memory, phases, code identity.

    PYTHONPATH=$PWD python scripts/compile_profile.py default            # 4096^3 f16
    PYTHONPATH=$PWD python scripts/compile_profile.py decode --time --trace
    PYTHONPATH=$PWD python scripts/compile_profile.py 4096x512x4096 -o -Ofast-compile=max
    PYTHONPATH=$PWD python scripts/compile_profile.py default --dump k.cu   # source only
    PYTHONPATH=$PWD python scripts/compile_profile.py default --source k.cu # edited source
    PYTHONPATH=$PWD python scripts/compile_profile.py default --cutlass-mainloop  # before session 39

The kernel is the one matmul would pick (describe.selection.config_for_shape, sm_count
132), emitted by the package's own emitter with its own options and patched headers.
The compile runs in a child process, so its peak RSS (getrusage RUSAGE_CHILDREN) is the
compile's alone. Prints the cubin size and a hash of each kernel's .text section: equal
hashes mean identical SASS for that entry (no GPU speed check needed).
--time: NVRTC's -time CSV (per phase). --trace: -fdevice-time-trace, streamed and
summarized (event kinds, heaviest instantiations). For an sm90 GEMM the trace is about
3.5 GB and takes 3x the compile time; NVRTC 13.0 then fails in ptxas ("Parsed trace
file not in expected format"), after the front end's and NVVM's part is written, which
is what gets summarized. Mind the load: the CPU time (user + sys of the child) is the
figure to compare when other work shares the cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

SHAPES = {"default": (4096, 4096, 4096), "decode": (4096, 16, 4096)}


def config_for(spec: str, element: str = "f16", activation: str = "identity", scheduler: str | None = None,
               with_c: bool = False, cutlass_epilogue: bool = False, lean: bool | None = None):
    import dataclasses

    from cutlass_sparse.describe import selection
    m, n, k = SHAPES.get(spec) or tuple(int(v) for v in spec.split("x"))
    config = selection.config_for_shape(m, n, k, element, element, "row", 132, family="sm90")
    changes = {}
    if activation != "identity":
        changes["activation"] = activation
    if scheduler:
        changes["tile_scheduler"] = scheduler
    if with_c:   # the kernel of a call with C (a bias, beta != 0): matmul's choice before session 16
        changes["reads_c"] = True
    if cutlass_epilogue:   # CUTLASS's TMA epilogue where the catalog takes our staged store (session 38)
        changes["staged_store"] = False
    if lean is not None:   # our mainloop producer and consumers, or CUTLASS's (session 39)
        changes["lean_mainloop"] = lean
    return dataclasses.replace(config, **changes) if changes else config


def text_sections(cubin: bytes) -> dict[str, str]:
    """section name -> sha256[:16] of its bytes, for every .text.* section (one per entry)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = heads[shstrndx][4]
    out = {}
    for name, _t, _f, _a, offset, size, *_ in heads:
        end = cubin.index(b"\0", names_off + name)
        sec = cubin[names_off + name:end].decode()
        if sec.startswith(".text."):
            out[sec] = (size, hashlib.sha256(cubin[offset:offset + size]).hexdigest()[:16])
    return out


def child(args) -> None:
    """Compile (in this process) and write the cubin; the parent measures."""
    from cutlass_sparse.build import compiler
    job = json.loads(Path(args.job).read_text())
    headers = tuple(tuple(h) for h in job["headers"])
    try:
        out = compiler.compile_to_cubin(job["source"], job["name"], job["options"], headers)
    except compiler.CompileError as exc:
        print(exc.log[-4000:], file=sys.stderr)
        sys.exit(3)
    Path(job["cubin"]).write_bytes(out.cubin)
    if out.log.strip():
        print(out.log[-2000:], file=sys.stderr)


def summarize_trace(path: Path, top: int = 15, threshold: float = 1.0) -> None:
    """Stream a trace (gigabytes for an sm90 kernel: every type name is spelled out) and print
    each event kind's count and summed seconds (nested) and the heaviest single events."""
    import re
    pattern = re.compile(rb'\{(?:"args":\{"detail":"((?:[^"\\]|\\.)*)"\},)?"dur":([0-9]+),"name":"([^"]*)"')
    counts, sums, big = defaultdict(int), defaultdict(float), []
    with open(path, "rb") as f:
        buf = b""
        while chunk := f.read(64 << 20):
            buf += chunk
            cut = buf.rfind(b'},{"')
            if cut < 0:
                continue
            part, buf = buf[:cut + 1], buf[cut + 2:]
            for m in pattern.finditer(part):
                name, dur = m.group(3).decode(), int(m.group(2)) / 1e6
                counts[name] += 1
                sums[name] += dur
                if dur >= threshold:
                    big.append((dur, name, (m.group(1) or b"").decode(errors="replace")))
        for m in pattern.finditer(buf):
            name, dur = m.group(3).decode(), int(m.group(2)) / 1e6
            counts[name] += 1
            sums[name] += dur
    print("  trace: events, summed seconds (nested)")
    for name in sorted(counts, key=lambda n: -sums[n])[:20]:
        print(f"    {counts[name]:9d} {sums[name]:9.1f}  {name}")
    print("  heaviest events:")
    for dur, name, detail in sorted(big, reverse=True)[:top * 3]:
        print(f"    {dur:8.2f}  {name[:30]:30s} {detail[:200]}")


def main() -> None:
    from cutlass_sparse.cli.args import Parser   # a bad command line: one line, exit 2

    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", help="default (4096^3), decode (4096x16x4096) or MxNxK")
    p.add_argument("-o", "--option", action="append", default=[], help="extra NVRTC option (repeatable)")
    p.add_argument("--drop-option", action="append", default=[], help="remove an emitted option")
    p.add_argument("--element", default="f16")
    p.add_argument("--activation", default="identity")
    p.add_argument("--scheduler", default=None, help="persistent or streamk (default: the catalog's)")
    p.add_argument("--with-c", action="store_true", help="the kernel with C in its epilogue (for a bias or beta)")
    p.add_argument("--cutlass-epilogue", action="store_true",
                   help="CUTLASS's TMA epilogue in place of the staged store the catalog takes")
    mainloop = p.add_mutually_exclusive_group()
    mainloop.add_argument("--lean", dest="lean", action="store_const", const=True,
                          help="our own mainloop producer and consumers (emit/sm90_lean_mainloop.py)")
    mainloop.add_argument("--cutlass-mainloop", dest="lean", action="store_const", const=False,
                          help="CUTLASS's mainloop where the catalog takes our own")
    p.add_argument("--time", action="store_true", help="NVRTC -time: phase CSV")
    p.add_argument("--trace", action="store_true", help="NVRTC -fdevice-time-trace: summarized JSON")
    p.add_argument("--dump", help="write the emitted source here and stop")
    p.add_argument("--source", help="compile this source file instead of the emitted one")
    p.add_argument("--cubin", help="keep the cubin here")
    p.add_argument("--header", action="append", default=[], metavar="INCLUDE=FILE",
                   help="hand NVRTC this file as the named include (repeatable)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    from cutlass_sparse.build import compiler
    from cutlass_sparse.emit.registry import emit
    config = config_for(args.shape, args.element, args.activation, args.scheduler, args.with_c,
                        args.cutlass_epilogue, args.lean)
    emitted = emit(config)
    if args.dump:
        Path(args.dump).write_text(emitted.source)
        print(f"{config.name}: source written to {args.dump}")
        return
    source = Path(args.source).read_text() if args.source else emitted.source
    work = Path(tempfile.mkdtemp(prefix="compile_profile-"))
    extra = [o for o in emitted.options if o not in args.drop_option] + args.option
    base = [o for o in compiler.BASE_OPTIONS if o not in args.drop_option]
    if args.time:
        extra.append(f"-time={work / 'time.csv'}")
    if args.trace:
        extra.append(f"-fdevice-time-trace={work / 'trace.json'}")
    options = [*base, compiler.arch_option("sm_90a"), *extra]
    cubin_path = Path(args.cubin) if args.cubin else work / "kernel.cubin"
    job = work / "job.json"
    headers = dict(emitted.headers)
    for item in args.header:
        include, file = item.split("=", 1)
        headers[include] = Path(file).read_text()
    job.write_text(json.dumps({"source": source, "name": config.name, "options": options,
                               "headers": list(headers.items()), "cubin": str(cubin_path)}))
    print(f"{config.name}\n  options: {' '.join(options)}", flush=True)
    start = time.perf_counter()
    rc = subprocess.call([sys.executable, __file__, "--child", "x", "--job", str(job)])
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak, cpu = usage.ru_maxrss / 1024 / 1024, usage.ru_utime + usage.ru_stime
    trace = work / "trace.json.json"   # NVRTC appends .json
    if rc:
        print(f"  FAILED (rc {rc}) after {wall:.1f} s")
        if args.trace and trace.exists():   # ptxas rejects the trace file; the front end's part is there
            summarize_trace(trace)
        sys.exit(rc)
    cubin = cubin_path.read_bytes()
    print(f"  wall {wall:.1f} s   cpu {cpu:.1f} s   peak RSS {peak:.2f} GB   cubin {len(cubin)} bytes"
          f"   load {os.getloadavg()[0]:.1f}")
    for sec, (size, digest) in text_sections(cubin).items():
        entry = "setup" if sec.endswith("_setup") else "gemm"
        print(f"  .text {entry:6s} {size:8d} bytes  sha256 {digest}")
    if args.time:
        print("  -time:")
        for line in (work / "time.csv").read_text().splitlines():
            print("    " + line)
    if args.trace:
        summarize_trace(trace)
        print(f"  trace: {trace}")


if __name__ == "__main__":
    main()
