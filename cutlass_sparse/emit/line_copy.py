"""Emitter for the staging copy: `lines` runs of `width` bytes from one pitch to another,
one entry per access width (the launcher picks the widest that divides both addresses,
both pitches and the width). No CUTLASS headers: it compiles in about a second.

Each thread moves a 16-byte chunk of a line: all its loads first, then its stores, so a
2-byte copy (an odd N of f16) still has 16 bytes in flight per thread (one 2-byte access
per thread left the copy waiting on memory latency: 62 us for 32 MB on the H100, where
the copy engine took 48). Threads walk the flattened (line, chunk) index in grid-sized
steps whose line and chunk parts are divided out once, so the loop has no division. The
entries wait on the previous grid (griddepcontrol.wait) and let the next one launch at
once: the GEMM after a staged x launches programmatically and waits for this grid to
finish before it reads (launch.pdl).
"""
from __future__ import annotations

from ..describe.description import LineCopyConfig
from . import arguments
from .emitted import Emitted
from .template import substitute

THREADS = 256
_UNIT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long", 16: "uint4"}

TEMPLATE = """\\
// ${name}
// Emitted by cutlass_sparse: the staging copy (lines of bytes between two pitches).
#include <cuda/std/type_traits>

extern "C" __constant__ int ${name}_threads = ${threads};
extern "C" __constant__ int ${name}_shared_bytes = 0;

${arguments_struct}
template <typename Unit>
__device__ __forceinline__ void copy_lines(${arguments_name} const &args) {
  constexpr int kUnits = 16 / sizeof(Unit);   // a thread's chunk: 16 bytes
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  unsigned long long const units = args.width / sizeof(Unit);
  unsigned long long const per_line = (units + kUnits - 1) / kUnits;
  unsigned long long const step = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long const step_lines = step / per_line, step_chunks = step % per_line;
  unsigned long long const first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long line = first / per_line, chunk = first % per_line;
  char *destination = static_cast<char *>(args.destination);
  char const *source = static_cast<char const *>(args.source);
  while (line < (unsigned long long)args.lines) {
    Unit const *from = reinterpret_cast<Unit const *>(source + line * args.source_pitch) + chunk * kUnits;
    Unit *to = reinterpret_cast<Unit *>(destination + line * args.destination_pitch) + chunk * kUnits;
    unsigned long long const left = units - chunk * kUnits;
    Unit held[kUnits];
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      if (u < left) held[u] = from[u];
    }
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      if (u < left) to[u] = held[u];
    }
    chunk += step_chunks;
    line += step_lines;
    if (chunk >= per_line) {
      chunk -= per_line;
      ++line;
    }
  }
}
${entries}"""

ENTRY = """
extern "C" __global__ void __launch_bounds__(${threads}) ${entry}(${arguments_name} const args) {
  copy_lines<${unit_type}>(args);
}
"""


def emit(config: LineCopyConfig) -> Emitted:
    layout = arguments.LINE_COPY
    entries = "".join(substitute(ENTRY, {"threads": THREADS, "entry": config.entry(unit), "unit_type": _UNIT_TYPES[unit],
                                         "arguments_name": layout.name}) for unit in config.UNITS)
    source = substitute(TEMPLATE, {"name": config.name, "threads": THREADS, "arguments_struct": layout.cpp(),
                                   "arguments_name": layout.name, "entries": entries})
    return Emitted(source, {config.entry(unit): layout.dtype.itemsize for unit in config.UNITS},
                   ("threads", "shared_bytes"))
