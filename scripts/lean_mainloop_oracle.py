"""Check LeanMainloop (emit/sm90_lean_mainloop.py) against CUTLASS's own sparse mainloop on the host.

    python scripts/lean_mainloop_oracle.py                 # every catalog sm90 tile, both x layouts
    python scripts/lean_mainloop_oracle.py --tile 128x256x64 --cluster 2x1

For each tile (f16; the layouts do not depend on the 16-bit type) this writes a C++ program
that builds CUTLASS's mainloop as the emitter does, runs CUTLASS's producer (its TMA
partitions and copies) and ours for several k-tiles, stages and every CTA of the cluster,
with the TMA instructions replaced by a print of their operands (descriptor, shared-memory
address, multicast mask, coordinates), and compares CUTLASS's metadata partition (the
shared-memory byte of every value each consumer thread reads) with ours. It compiles the
program with g++ (a development tool only: the library needs no host compiler) against the
installed CUTLASS headers, with the in-flight patch where the tile takes it.

Prints one line per tile and exits 1 if any differs. A tile that differs must not take the
lean mainloop (SparseGemmConfig.takes_lean_mainloop).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cutlass_sparse import env  # noqa: E402
from cutlass_sparse.describe import catalog  # noqa: E402
from cutlass_sparse.emit import nvrtc_headers, sm90_lean_mainloop  # noqa: E402

TMA_COPY_HEADER = "cute/arch/copy_sm90_tma.hpp"

PROGRAM = r"""
// Device intrinsics the headers name; never called on the host.
inline void __syncthreads() {}
inline void __syncwarp(unsigned = 0xffffffff) {}
struct HostDim3 { unsigned x = 0, y = 0, z = 0; };
inline HostDim3 threadIdx, blockIdx, blockDim, gridDim;
#include <cstdio>
#include <iostream>
#include <sstream>
#include <cuda.h>
#include <cutlass/cutlass.h>
#define private public   // CUTLASS's metadata partition helpers are private
#include <cute/tensor.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#undef private
#include <cutlass/util/packed_stride.hpp>
using namespace cute;
using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using TileShape = Shape<_@TM@, _@TN@, _@TK@>;
using ClusterShape = Shape<_@CM@, _@CN@, _1>;
using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp,
    ElementA, cutlass::layout::RowMajor, 8, ElementB, cutlass::layout::@LAYOUT_B@, 8,
    float, TileShape, ClusterShape, cutlass::gemm::collective::StageCount<3>,
    cutlass::gemm::@SCHEDULE@>::CollectiveOp;
@LEAN@
using Lean = cutlass_sparse::LeanMainloop<BuiltMainloop, cutlass_sparse::Boxes<@BOXES_A@>,
                                          cutlass_sparse::Boxes<@BOXES_E@>, cutlass_sparse::Boxes<@BOXES_B@>>;
using M_ = BuiltMainloop;

int main() {
  int M = 1024, N = 1024, K = 1024;
  auto problem = make_shape(M, N, K, 2);   // a batch of two: the second one's coordinates
  using SparseConfig = typename M_::SparseConfig;
  typename M_::Arguments args{(ElementA const*)0x100000, SparseConfig::fill_layoutA(problem),
      (ElementB const*)0x200000, cutlass::make_cute_packed_stride(typename M_::StrideB{}, make_shape(N, K, 2)),
      (typename M_::ElementE const*)0x300000, SparseConfig::fill_layoutE(problem)};
  auto params = M_::to_underlying_arguments(problem, args, nullptr);
  alignas(1024) static typename M_::TensorStorage smem;
  M_ mainloop;
  auto [gA_mkl, gB_nkl, gE_mkl] = mainloop.load_init(problem, params);
  int const m_coord = 3, n_coord = 2, l_coord = 1;
  uint64_t barrier;
  for (int rank = 0; rank < @CM@ * @CN@; ++rank) {
    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.begin()), typename M_::SmemLayoutA{});
    Tensor sE = make_tensor(make_smem_ptr(smem.smem_E.begin()), typename M_::SmemLayoutE{});
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.begin()), typename M_::SmemLayoutB{});
    Layout cta_layout = make_layout(ClusterShape{});
    auto cta = cta_layout.get_flat_coord(rank);
    uint16_t mask_a = create_tma_multicast_mask<1>(cta_layout, cta);
    uint16_t mask_b = create_tma_multicast_mask<0>(cta_layout, cta);
    auto tma_a = params.tma_load_a.get_slice(get<1>(cta));
    auto tma_e = params.tma_load_e.get_slice(get<1>(cta));
    auto tma_b = params.tma_load_b.get_slice(get<0>(cta));
    Tensor tAgA = tma_a.partition_S(gA_mkl(_,_,m_coord,_,l_coord)); Tensor tAsA = tma_a.partition_D(sA);
    Tensor tEgE = tma_e.partition_S(gE_mkl(_,_,m_coord,_,l_coord)); Tensor tEsE = tma_e.partition_D(sE);
    Tensor tBgB = tma_b.partition_S(gB_nkl(_,_,n_coord,_,l_coord)); Tensor tBsB = tma_b.partition_D(sB);
    for (int k = 0; k < 3; ++k) for (int stage = 0; stage < 3; ++stage) {
      printf("CUTLASS %d %d %d\n", rank, k, stage);
      copy(params.tma_load_a.with(barrier, mask_a), tAgA(_,_,_,k), tAsA(_,_,_,stage));
      copy(params.tma_load_e.with(barrier, mask_a), tEgE(_,_,_,k), tEsE(_,_,_,stage));
      copy(params.tma_load_b.with(barrier, mask_b), tBgB(_,_,_,k), tBsB(_,_,_,stage));
      printf("LEAN %d %d %d\n", rank, k, stage);
      Lean::load_stage(params, &barrier, smem, gA_mkl, gB_nkl, gE_mkl, m_coord, n_coord, k, l_coord, stage,
                       get<0>(cta), get<1>(cta), mask_a, mask_b);
    }
  }
  printf("END\n");
  // The consumers' metadata: CUTLASS's partition (its mma's) against Lean::metadata_offset.
  Tensor sE = as_position_independent_swizzle_tensor(make_tensor(make_smem_ptr(smem.smem_E.begin()), typename M_::SmemLayoutE{}));
  using TiledMma = typename M_::TiledMma;
  char* base = (char*)raw_pointer_cast(smem.smem_E.begin());
  constexpr int Sparsity = M_::ElementEMma::sparsity;
  constexpr int StageBytes = int(typename M_::SmemLayoutE{}.layout_b()(0, 0, 1)) / Sparsity;
  long checked = 0, wrong = 0;
  for (int thread = 0; thread < int(size(TiledMma{})); ++thread) {
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_thread_slice(thread / 128 * 128);
    Tensor tCsE = M_::partition_E(thread_mma, sE(_,_,Int<0>{}));
    Tensor tCrE = make_fragment_like<typename M_::ElementEMma>(tCsE);
    auto copy_e = M_::make_tiled_copy_E(Copy_Atom<typename M_::SmemCopyAtomE, uint32_t>{}, tiled_mma).get_thread_slice(thread);
    Tensor tEsE = copy_e.partition_S(sE);
    Tensor tErE = copy_e.retile_D(tCrE);
    static_assert(decltype(rank(tErE))::value == 3, "(ECPY, atoms along M, k-blocks)");
    for (int s = 0; s < 3; ++s) for (int mm = 0; mm < int(size<1>(tErE)); ++mm) for (int kb = 0; kb < int(size<2>(tErE)); ++kb) {
      Tensor values = tEsE(_, mm, kb, s);
      for (int v = 0; v < int(size(values)); ++v) {
        int const theirs = int((char*)raw_pointer_cast(&values(v)) - base);
        // as the kernel reads it: Run k-blocks' words in one vector from the first one's offset
        constexpr int Run = Lean::template metadata_run<decltype(size<2>(tErE))::value>();
        int const ours = s * StageBytes + Lean::metadata_offset(thread, mm, kb / Run * Run) + 4 * (kb % Run) + v / Sparsity;
        ++checked;
        if (theirs != ours && wrong++ < 5) {
          printf("METADATA thread %d stage %d atom %d k-block %d value %d: CUTLASS byte %d, ours %d\n",
                 thread, s, mm, kb, v, theirs, ours);
        }
      }
    }
  }
  printf("METADATA checked %ld wrong %ld\n", checked, wrong);
}
extern "C" cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t) { return cudaSuccess; }
extern "C" cudaError_t cudaGetLastError() { return cudaSuccess; }
"""


def printing_tma_copies(text: str) -> str:
    """CuTe's TMA load instructions, each made to print its operands (on the host they are
    unreachable otherwise)."""
    out = text
    pattern = r"struct (SM90_TMA_LOAD(?:_MULTICAST)?_(\d)D)\n\{.*?\n\};"
    for match in reversed(list(re.finditer(pattern, text, re.S))):
        block, name, rank = match.group(0), match.group(1), int(match.group(2))
        multicast = "MULTICAST" in name
        mask = "int(multicast_mask)" if multicast else "-1"
        stub = (f'printf("TMA {name} desc %p smem %p mask %d crd", desc_ptr, smem_ptr, {mask}); '
                + " ".join(f'printf(" %d", int(crd{i}));' for i in range(rank)) + ' printf("\\n");')
        unreachable = '#else\n    CUTE_INVALID_CONTROL_PATH("Trying to use tma without CUTE_ARCH_TMA_SM90_ENABLED.");'
        head = re.search(r"copy\(void const\* desc_ptr, uint64_t\* mbar_ptr,(?: uint16_t multicast_mask,)? "
                         r"uint64_t cache_hint,\s*void\s*\* smem_ptr,", block)
        at = block.index(unreachable, head.end())
        block = block[:at] + "#else\n    " + stub + block[at + len(unreachable):]
        out = out[:match.start()] + block + out[match.end():]
    return out


def check(config, keep: Path | None = None) -> tuple[bool, str]:
    tm, tn, tk = config.threadblock
    box_a, box_e, box_b = sm90_lean_mainloop.boxes(config)
    program = PROGRAM
    for key, value in {"TM": tm, "TN": tn, "TK": tk, "CM": config.cluster[0], "CN": config.cluster[1],
                       "LAYOUT_B": "RowMajor" if config.layout_b == "row" else "ColumnMajor",
                       "SCHEDULE": "KernelTmaWarpSpecializedCooperative" if config.schedule == "cooperative"
                       else "KernelTmaWarpSpecializedPingpong",
                       "LEAN": sm90_lean_mainloop.LEAN_MAINLOOP,
                       "BOXES_A": ", ".join(map(str, box_a)), "BOXES_E": ", ".join(map(str, box_e)),
                       "BOXES_B": ", ".join(map(str, box_b))}.items():
        program = program.replace(f"@{key}@", str(value))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        overlay = root / "overlay"
        cutlass_include = env.include_dirs()[0]
        (overlay / TMA_COPY_HEADER).parent.mkdir(parents=True)
        (overlay / TMA_COPY_HEADER).write_text(printing_tma_copies((cutlass_include / TMA_COPY_HEADER).read_text()))
        for include, text in nvrtc_headers.patched_headers(config.mma_in_flight):
            if include == nvrtc_headers.SPARSE_MAINLOOP_HEADER:
                (overlay / include).parent.mkdir(parents=True, exist_ok=True)
                (overlay / include).write_text(text)
        source = root / "oracle.cpp"
        source.write_text(program)
        if keep:
            keep.write_text(program)
        binary = root / "oracle"
        build = subprocess.run(
            ["g++", "-std=c++17", "-O0", "-w", "-fpermissive", "-DCUTLASS_SM90_COLLECTIVE_BUILDER_SUPPORTED",
             f"-I{overlay}", *(f"-I{path}" for path in env.include_dirs()), str(source), "-o", str(binary)],
            capture_output=True, text=True)
        if build.returncode:
            errors = [line for line in build.stderr.splitlines() if "error" in line]
            return False, "does not compile: " + (errors[0] if errors else build.stderr[-300:])
        run = subprocess.run([str(binary)], capture_output=True, text=True)
    return compare(run.stdout)


def compare(output: str) -> tuple[bool, str]:
    """CUTLASS's TMA instructions per (rank, k-tile, stage) against ours, and the metadata line."""
    issued: dict[tuple[str, str], list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith(("CUTLASS ", "LEAN ")):
            who, where = line.split(" ", 1)
            current = (who, where)
            issued[current] = []
        elif line.startswith("TMA ") and current:
            issued[current].append(line)
        else:
            current = None
    stages = [where for who, where in issued if who == "CUTLASS"]
    differ = [where for where in stages if issued[("CUTLASS", where)] != issued.get(("LEAN", where))]
    instructions = sum(len(issued[("CUTLASS", where)]) for where in stages)
    metadata = next((line for line in output.splitlines() if line.startswith("METADATA checked")), "METADATA missing")
    wrong = [line for line in output.splitlines() if line.startswith("METADATA thread")]
    ok = bool(stages) and not differ and metadata.endswith(" wrong 0")
    detail = f"{instructions} TMA instructions over {len(stages)} stage loads, {len(differ)} differ; {metadata}"
    if differ:
        where = differ[0]
        detail += f"\n  first difference ({where}):\n    CUTLASS " + "\n    CUTLASS ".join(issued[("CUTLASS", where)]) \
            + "\n    ours    " + "\n    ours    ".join(issued.get(("LEAN", where), []))
    if wrong:
        detail += "\n  " + "\n  ".join(wrong)
    return ok, detail


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tile", help="MxNxK (default: every sm90 catalog tile)")
    p.add_argument("--cluster", help="MxN cluster (with --tile)")
    p.add_argument("--layout-b", choices=("row", "col"), help="one x layout (default both)")
    p.add_argument("--keep", type=Path, help="write the (last) generated program here")
    args = p.parse_args()
    family = catalog.load("sm90")
    seen, configs = set(), []
    if args.tile and args.cluster:   # any tile, in the catalog or not
        tile = tuple(int(v) for v in args.tile.split("x"))
        cluster = (*(int(v) for v in args.cluster.split("x")), 1)
        candidates = [dataclasses.replace(config, threadblock=tile, cluster=cluster, schedule=schedule,
                                          layout_b=layout, lean_mainloop=True)
                      for config in family.enumerate()[:1] for layout in ("row", "col")
                      for schedule in ("cooperative" if tile[0] >= 128 else "pingpong",)]
    else:
        candidates = family.enumerate()
    for config in candidates:
        if config.element != "f16" or config.element_out != "f16":
            continue
        if args.tile and "x".join(map(str, config.threadblock)) != args.tile:
            continue
        if args.cluster and "x".join(map(str, config.cluster[:2])) != args.cluster:
            continue
        if args.layout_b and config.layout_b != args.layout_b:
            continue
        what = (config.threadblock, config.cluster, config.schedule, config.layout_b, config.mma_in_flight)
        if what not in seen:
            seen.add(what)
            configs.append(config)
    failed = 0
    for config in configs:
        ok, detail = check(config, args.keep)
        failed += not ok
        label = (f"{'x'.join(map(str, config.threadblock))} c{config.cluster[0]}x{config.cluster[1]} {config.schedule} "
                 f"x {config.layout_b}{' in flight' if config.mma_in_flight else ''}")
        print(f"{'same' if ok else 'DIFFERS':8} {label}: {detail}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
