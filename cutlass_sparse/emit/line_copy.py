"""Emitter for the staging copy: `lines` runs of `width` bytes from one pitch to another,
one entry per access width (the launcher picks the widest that divides both addresses,
both pitches and the width). No CUTLASS headers: it compiles in about a second.

Threads walk the flattened (line, unit) index, neighbours on neighbouring units (so
every load and store is coalesced, across line ends too: a decode step's lines are 14
bytes), eight units a thread per round, all eight loads before the stores: one 2-byte
access a thread at a time left a 32 MB copy waiting on memory latency (62 us on the
H100, where the copy engine took 48), and 16 contiguous bytes a thread uncoalesced the
stores (120 us). Steps are divided into line and unit parts once, so the loop has no
division. The entries wait on the previous grid (griddepcontrol.wait) and let the next
one launch at once: the GEMM after a staged x launches programmatically and waits for
this grid to finish before it reads (launch.pdl).
"""
from __future__ import annotations

from ..describe.helper_kernels import LineCopyConfig
from . import arguments
from .emitted import Emitted
from .template import substitute

THREADS = 256
PER_THREAD = 8   # units a thread moves per round of its grid-stride loop
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
  constexpr int kRound = ${per_thread};   // units a thread moves per round, loads first
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  unsigned long long const per_line = args.width / sizeof(Unit);
  unsigned long long const lines = args.lines;
  unsigned long long const step = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long const step_lines = step / per_line, step_units = step % per_line;
  unsigned long long const first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long line = first / per_line, unit = first % per_line;
  char *destination = static_cast<char *>(args.destination);
  char const *source = static_cast<char const *>(args.source);
  while (line < lines) {
    unsigned long long at_line[kRound], at_unit[kRound];
    Unit held[kRound];
#pragma unroll
    for (int r = 0; r < kRound; ++r) {
      at_line[r] = line;
      at_unit[r] = unit;
      if (line < lines) held[r] = reinterpret_cast<Unit const *>(source + line * args.source_pitch)[unit];
      unit += step_units;
      line += step_lines;
      if (unit >= per_line) {
        unit -= per_line;
        ++line;
      }
    }
#pragma unroll
    for (int r = 0; r < kRound; ++r) {
      if (at_line[r] < lines)
        reinterpret_cast<Unit *>(destination + at_line[r] * args.destination_pitch)[at_unit[r]] = held[r];
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
    entries = "".join(substitute(ENTRY, {"threads": THREADS, "entry": config.entry(unit),
                                         "unit_type": _UNIT_TYPES[unit], "arguments_name": layout.name})
                      for unit in config.UNITS)
    source = substitute(TEMPLATE, {"name": config.name, "threads": THREADS, "arguments_struct": layout.cpp(),
                                   "arguments_name": layout.name, "entries": entries, "per_thread": PER_THREAD})
    return Emitted(source, {config.entry(unit): layout.dtype.itemsize for unit in config.UNITS},
                   ("threads", "shared_bytes"))
