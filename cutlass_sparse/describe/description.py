"""One sparse GEMM kernel configuration, as plain values.

A SparseGemmConfig is what the catalog lists and selection picks: hashable, printable,
its procedural name doubling as identity and C++ symbol. Its cutlass_library objects
(MathInstruction, TileDescription, TensorDescriptions for A, E, B, C/D, epilogue and
swizzle), which the emitter turns into C++, come from cutlass_types.CutlassDescriptions.
"""
from __future__ import annotations

import functools
import hashlib
import json
import dataclasses
from dataclasses import asdict, dataclass

from . import dtypes
from .cutlass_types import EPILOGUES, LAYOUTS, SCHEDULES, SWIZZLES, CutlassDescriptions

# Activations applied after alpha * acc + beta * C: name -> CUTLASS's functor in
# cutlass::epilogue::thread (2.x LinearCombinationGeneric, 3.x fusion LinCombEltAct).
# leaky_relu takes its negative slope at run time.
ACTIVATIONS = {
    "identity": "Identity", "relu": "ReLu", "leaky_relu": "LeakyReLU", "gelu": "GELU",
    "gelu_tanh": "GELU_taylor", "silu": "SiLu", "sigmoid": "Sigmoid", "tanh": "Tanh", "hardswish": "HardSwish",
}
FAMILIES = ("sm80", "sm90")
# sm90 epilogue scales (issue 15): "none", or "row_col": D = act(alpha * s_row[m] *
# s_col[n] * acc + bias[m]) / out_scale with float32 vectors given at run time (each may be
# absent).
SCALES = ("none", "row_col")
# sm90 tile schedulers: "persistent" (data-parallel tiles) or "streamk" (CUTLASS's stream-K
# scheduler, which also runs split-K: K slices reduced in a workspace; cooperative only).
TILE_SCHEDULERS = ("persistent", "streamk")
# sm90 tile scheduler's raster order (CUTLASS's RasterOrderOptions): 0 its heuristic (along
# the longer side's tiles), 1 along M, 2 along N. A run-time argument, like the swizzle.
RASTERS = (0, 1, 2)
# sm90 cooperative producer registers (load_registers): 0 is CUTLASS's 40; the consumers get
# the rest of the CTA's registers in steps of 8 (consumer_registers).
LOAD_REGISTERS = (0, 56, 72)
# setmaxnreg moves registers among a CTA's warp groups: the pool is what the launch gives
# the cooperative kernel's 384 threads (168 each, as ptxas allocates them).
COOPERATIVE_REGISTER_POOL = 384 * 168
# CUTLASS's consumer registers without load_registers (its producer keeps 40), and the
# accumulator registers per consumer thread from which it splits 24/240 instead
# (HeavyRegisterPressure), a split the patch leaves alone.
CUTLASS_CONSUMER_REGISTERS = 232
HEAVY_ACCUMULATORS = 208
# D's types the staged epilogue writes (SparseGemmConfig.stores_staged): alpha * acc rounded
# to a 16-bit float, which stmatrix writes; float32 and int32 D stay CUTLASS's epilogue's.
STAGED_OUTPUTS = ("f16", "bf16")
# Inputs LeanMainloop reads (emit.sm90_lean_mainloop): 16-bit A, whose metadata map is wgmma.sp k32's.
LEAN_INPUTS = ("f16", "bf16")


@dataclass(frozen=True)
class SparseGemmConfig(CutlassDescriptions):
    """D[M,N] = alpha * A[M,K] (2:4 sparse, row-major) @ B[K,N] + beta * C[M,N] (row-major, or
    column-major for sm90 with layout_c="col")."""

    family: str                      # kernel family: "sm80" (CUTLASS 2.x, mma.sp)
    element: str                     # A and B: "f16" | "bf16"
    element_out: str                 # C and D: "f16" | "bf16" | "f32"
    layout_b: str                    # "row" | "col"
    threadblock: tuple[int, int, int]
    warps: tuple[int, int, int]
    stages: int
    instruction: tuple[int, int, int]
    alignment_a: int                 # in elements of A's stored values
    alignment_b: int
    alignment_c: int
    swizzle: int
    min_compute: int = 80
    accumulator: str = "f32"
    epilogue: str = "linear_combination"
    # CUTLASS 3.x (family sm90) only: thread-block cluster and warp-specialized schedule.
    cluster: tuple[int, int, int] = (1, 1, 1)
    schedule: str = "none"           # sm90: "cooperative" | "pingpong"
    tile_scheduler: str = "persistent"   # sm90: one of TILE_SCHEDULERS
    activation: str = "identity"     # one of ACTIVATIONS
    layout_c: str = "row"            # C and D; "col" (M contiguous): sm90 only
    scales: str = "none"             # one of SCALES (sm90 only)
    # sm90 fp8 only: CUTLASS's FP8FastAccum schedules, which accumulate in the wgmma's own
    # registers (as dense fp8 GEMMs with fast accumulation do). The other mainloop adds each
    # K block's partial sums into a second fp32 accumulator: twice the accumulator
    # registers, which spills at 64x256 per warpgroup and halved the speed on the H100.
    fast_accum: bool = False
    # B's type where it is not A's ("": the same): sm90 e4m3 weights with e5m2 activations
    element_b: str = ""
    # sm90: whether the epilogue reads C. False (beta = 0, no bias folded into C): CUTLASS's
    # epilogue gets no C (ElementC void), so its shared memory holds D's buffers only and
    # the mainloop takes the room as another stage.
    reads_c: bool = True
    # sm90: the epilogue's subtile (M, N) that D goes through shared memory in; () is
    # CUTLASS's choice (EpilogueTileAuto). A narrower one takes less shared memory, which
    # can leave room for another mainloop stage (an int32 D's buffers are twice a bf16 D's).
    epilogue_tile: tuple[int, ...] = ()
    # sm90: the mainloop keeps one k-tile's wgmma batch in flight while the next k-tile's
    # metadata loads into a second register fragment (emit.nvrtc_headers); CUTLASS's sparse
    # mainloop waits for each batch, so the tensor cores drain every k-tile.
    mma_in_flight: bool = False
    # sm90: the epilogue writes D from registers straight to global memory (CUTLASS's
    # NoSmemWarpSpecialized: no shared memory, no TMA store), and the kernel compiles in
    # 40-60% less time (the TMA epilogue's store is the largest instantiation). Faster at
    # decode on the 64x16x256 c4x1 tile, 13-26% slower on the large tiles (sweep rounds 12
    # and 13). A wish: taken only by the kernels it was measured on (stores_directly), so a
    # catalog tile can ask for it whatever epilogue a call later gives its configuration.
    direct_store: bool = False
    # sm90 cooperative: the epilogue writes D = alpha * acc through our own TMA epilogue
    # (emit.sm90_staged_epilogue: stmatrix into swizzled shared-memory chunks, then TMA) in
    # place of CUTLASS's, whose collective is about 40% of the kernel's compile time and
    # memory (docs/compile_time.md, session 38). A wish, like direct_store: taken by the
    # kernels it serves (stores_staged).
    staged_store: bool = False
    # sm90: the mainloop's producer and consumers are our own (emit.sm90_lean_mainloop: the
    # same TMA and wgmma.sp instructions as CUTLASS's, without CuTe's partitioning algebra,
    # which is about a third of the kernel's compile time and memory). A wish, like
    # staged_store: taken where it applies (takes_lean_mainloop).
    lean_mainloop: bool = False
    # sm90: the tile scheduler's raster order (RASTERS); run-time, shared by one binary.
    raster: int = 0
    # sm90 cooperative: registers the producer (TMA) warp group keeps after setmaxnreg (0:
    # CUTLASS's 40); the two consumer warp groups get what is left of the CTA's pool
    # (consumer_registers). The stream-K scheduler's bookkeeping spilled at 40.
    load_registers: int = 0

    def __post_init__(self):
        checks = [
            (self.element_b == "" or (self.family == "sm90" and self.element_b != self.element
                                       and self.element_b in dtypes.X_ELEMENTS.get(self.element, ())),
             f"element_b {self.element_b!r}: '' (B of A's type) or, for an sm90 {self.element} A, another of "
             f"{dtypes.X_ELEMENTS.get(self.element, (self.element,))}"),
            (self.element in (dtypes.SM90_KERNEL_INPUT_NAMES if self.family == "sm90" else dtypes.SM80_INPUT_NAMES),
             f"element {self.element!r}: family {self.family} takes "
             f"{dtypes.SM90_KERNEL_INPUT_NAMES if self.family == 'sm90' else dtypes.SM80_INPUT_NAMES}"),
            (self.family != "sm90" or self.element not in dtypes.EIGHT_BIT_NAMES or self.layout_b == "col",
             f"element {self.element!r}: wgmma reads 8-bit operands K-major only, so x must be "
             f"layout_b 'col' (the library stages a row-major x)"),
            (self.element_out in self.outputs_allowed,
             f"element_out {self.element_out!r} must be one of {self.outputs_allowed}"),
            (self.activation == "identity" or self.element_out not in dtypes.INTEGER_NAMES,
             f"activation {self.activation!r} needs a floating-point output, not {self.element_out}"),
            (self.layout_b in LAYOUTS, f"layout_b {self.layout_b!r} must be 'row' or 'col'"),
            (self.layout_c in LAYOUTS, f"layout_c {self.layout_c!r} must be 'row' or 'col'"),
            (self.layout_c == "row" or self.family == "sm90",
             "layout_c 'col': CUTLASS 2.x sparse kernels write row-major D only (family sm90 writes either)"),
            (self.swizzle in SWIZZLES, f"swizzle {self.swizzle} must be one of {sorted(SWIZZLES)}"),
            (self.raster in RASTERS and (self.raster == 0 or self.is_3x),
             f"raster {self.raster} must be one of {RASTERS} (sm90; sm80 takes 0)"),
            (self.epilogue in EPILOGUES, f"epilogue {self.epilogue!r} must be one of {sorted(EPILOGUES)}"),
            (self.threadblock[2] % (2 * self.instruction[2]) == 0,
             f"threadblock K must be a multiple of twice the instruction's K ({2 * self.instruction[2]})"),
            (self.family in FAMILIES, f"family {self.family!r} must be one of {sorted(FAMILIES)}"),
            ((self.schedule in SCHEDULES) == (self.family == "sm90"),
             f"schedule {self.schedule!r}: sm90 takes one of {sorted(SCHEDULES)}, sm80 none"),
            (self.activation in ACTIVATIONS, f"activation {self.activation!r} must be one of {sorted(ACTIVATIONS)}"),
            (self.tile_scheduler in TILE_SCHEDULERS, f"tile_scheduler {self.tile_scheduler!r} must be one of {TILE_SCHEDULERS}"),
            (self.scales in SCALES, f"scales {self.scales!r} must be one of {SCALES}"),
            (self.scales == "none" or (self.family == "sm90" and self.activation != "leaky_relu"),
             "scales 'row_col': family sm90 only, and no leaky_relu (its slope has no place in the scaled epilogue)"),
            (self.scales == "none" or self.element_out != "s32",
             "scales 'row_col': an int32 output is the raw accumulator (scales need a float or int8 output)"),
            (not self.fast_accum or (self.family == "sm90" and self.element in dtypes.FP8_NAMES),
             f"fast_accum: sm90 fp8 kernels only, not {self.family} {self.element}"),
            (self.epilogue_tile == () or (self.family == "sm90" and len(self.epilogue_tile) == 2
                                           and min(self.epilogue_tile) > 0
                                           and self.threadblock[0] % self.epilogue_tile[0] == 0
                                           and self.threadblock[1] % self.epilogue_tile[1] == 0),
             f"epilogue_tile {self.epilogue_tile}: () or, for family sm90, (M, N) dividing the tile"),
            (not self.mma_in_flight or self.family == "sm90",
             f"mma_in_flight: family sm90 only (wgmma), not {self.family}"),
            (not self.mma_in_flight or self.element not in dtypes.FP8_NAMES or self.fast_accum,
             "mma_in_flight: an fp8 kernel needs fast_accum (the other fp8 mainloop is CUTLASS's own, unpatched)"),
            (self.reads_c or self.family == "sm90",
             "reads_c False: family sm90 only (CUTLASS 2.x sparse kernels always have a C operand)"),
            (not self.direct_store or self.family == "sm90",
             f"direct_store: family sm90 only (CUTLASS 3.x's epilogues), not {self.family}"),
            (not self.staged_store or self.family == "sm90",
             f"staged_store: family sm90 only (it replaces a CUTLASS 3.x epilogue), not {self.family}"),
            (not self.lean_mainloop or self.family == "sm90",
             f"lean_mainloop: family sm90 only (it replaces a CUTLASS 3.x mainloop's), not {self.family}"),
            (self.load_registers in LOAD_REGISTERS,
             f"load_registers {self.load_registers} must be one of {LOAD_REGISTERS} (0: CUTLASS's 40)"),
            (self.load_registers == 0 or (self.schedule == "cooperative"
                                          and self.threadblock[0] * self.threadblock[1] // 256 < HEAVY_ACCUMULATORS),
             f"load_registers {self.load_registers}: a register split for the sm90 'cooperative' schedule below "
             f"{HEAVY_ACCUMULATORS} accumulators a thread (CUTLASS splits larger tiles its own way), not "
             f"{self.family} {self.schedule} {'x'.join(map(str, self.threadblock))}"),
            (self.tile_scheduler == "persistent" or self.schedule == "cooperative",
             "tile_scheduler 'streamk' needs the sm90 'cooperative' schedule (CUTLASS's ping-pong kernel has no stream-K)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def stores_directly(self) -> bool:
        """Whether the kernel stores D from registers: direct_store asked, and a kernel like
        those the sweeps measured and checked (rounds 12 and 13: f16 and bf16 operands and D,
        D row-major, no C, the identity activation, no scales, CUTLASS's subtile, the
        persistent scheduler). CUTLASS's register-to-global epilogue computes alpha * acc +
        beta * C only."""
        return (self.direct_store and not self.reads_c and self.activation == "identity"
                and self.scales == "none" and self.epilogue_tile == () and self.layout_c == "row"
                and self.tile_scheduler == "persistent" and self.element in dtypes.INPUT_NAMES
                and self.element_out == self.element and not self.element_b)

    @property
    def stores_staged(self) -> bool:
        """Whether the kernel's epilogue is the staged store: asked, not the direct store, and
        a kernel it computes (no C, the identity activation, no scales, a 16-bit output; the
        cooperative schedule, whose two consumer warp groups share the chunk, and the
        persistent scheduler, whose tiles need no reduction; D's rows in whole 16-byte
        vectors, which TMA stores; a tile of at most 256 by 256, N in 16-column steps, as
        its chunks and TMA boxes take it). CUTLASS's epilogue subtile does not apply to it."""
        return (self.staged_store and self.family == "sm90" and not self.stores_directly
                and not self.reads_c and self.activation == "identity" and self.scales == "none"
                and self.element_out in STAGED_OUTPUTS and self.schedule == "cooperative"
                and self.tile_scheduler == "persistent" and self.epilogue_tile == ()
                and self.alignment_c * dtypes.numpy_dtype(self.element_out).itemsize % 16 == 0
                and self.threadblock[1] % 16 == 0 and self.threadblock[1] <= 256 and self.threadblock[0] <= 256)

    @property
    def takes_lean_mainloop(self) -> bool:
        """Whether the kernel's mainloop is LeanMainloop: asked, sm90, 16-bit A and B (its
        metadata map is wgmma.sp k32's, its accumulators float), and a tile of whole swizzle
        atoms (a power of two up to 64 elements along a contiguous dimension, or multiples of
        64) that a multicast cuts into whole boxes of 16 to 256 rows: what
        emit.sm90_lean_mainloop.boxes derives, as CuTe does (scripts/lean_mainloop_oracle.py
        checks every catalog tile against CUTLASS's own producer and consumer). Not a tile of
        K 256 in a cluster along N: CuTe cuts its metadata box along K (two layout atoms a
        k-tile) where boxes cuts rows."""
        (rows, columns, k), (cluster_m, cluster_n, _) = self.threadblock, self.cluster
        cut_b, whole_b = (k, columns) if self.layout_b == "row" else (columns, k)   # B's multicast cuts K or N
        return (self.lean_mainloop and self.family == "sm90" and self.element in LEAN_INPUTS
                and self.b_element == self.element and self.accumulator == "f32"
                and rows % cluster_n == 0 and 16 <= rows // cluster_n <= 256 and (k <= 128 or cluster_n == 1)
                and cut_b % cluster_m == 0 and cut_b // cluster_m <= 256
                and all(extent % 64 == 0 or extent in (8, 16, 32) for extent in (k // 2, whole_b)))

    @property
    def cutlass_pieces_left_out(self) -> int:
        """How many of the sm90 GEMM's two heaviest CUTLASS pieces to compile this kernel does
        without (0-2): its TMA epilogue, its mainloop's producer and consumers. Compile time
        and memory budgets go by it (build.kernels.compile_estimate, build.warmup)."""
        return (not self.builds_cutlass_tma_epilogue) + self.takes_lean_mainloop

    @property
    def builds_cutlass_tma_epilogue(self) -> bool:
        """Whether the kernel instantiates CUTLASS's TMA epilogue (an sm90 kernel with neither
        the direct nor the staged store): the heavier compile, in time and memory."""
        return self.is_3x and not (self.stores_directly or self.stores_staged)

    # -- identity of the operands --------------------------------------------------

    @property
    def outputs_allowed(self) -> tuple[str, ...]:
        return dtypes.outputs_for(self.element, self.family)

    @property
    def is_3x(self) -> bool:
        return self.family == "sm90"

    @property
    def b_element(self) -> str:
        """B's element type (x's): element_b, or A's."""
        return self.element_b or self.element

    # -- identity ---------------------------------------------------------------------

    @functools.cached_property
    def name(self) -> str:
        """CUTLASS's procedural name, plus what CUTLASS's name leaves out (B/C alignment, swizzle)."""
        name = self.operation.procedural_name()
        if (self.alignment_b, self.alignment_c) != (self.alignment_a, self.alignment_a):
            name += f"_b{self.alignment_b}c{self.alignment_c}"
        if self.tile_scheduler != "persistent":
            name += f"_{self.tile_scheduler}"
        if self.activation != "identity":
            name += f"_{self.activation}"
        if self.scales != "none":
            name += "_scaled"
        if self.epilogue_tile:
            name += "_epi" + "x".join(map(str, self.epilogue_tile))
        if self.mma_in_flight:
            name += "_inflight"
        if self.load_registers:
            name += f"_ld{self.load_registers}"
        if self.takes_lean_mainloop:
            name += "_lean"
        if not self.reads_c:
            name += "_noc"
        if self.stores_staged:   # CUTLASS's name says which of its epilogues; ours is neither
            name = name.replace("_epi_tma", "_epi_staged")
        return name if self.is_3x else f"{name}_swz{self.swizzle}"   # 3.x: stages are in the name

    @functools.cached_property
    def key(self) -> str:
        """Stable short hash of every field."""
        fields = asdict(self)
        fields["direct_store"] = self.stores_directly   # a wish the epilogue refuses changes nothing
        fields["staged_store"] = self.stores_staged
        fields["lean_mainloop"] = self.takes_lean_mainloop
        for field, default in (("scales", "none"), ("fast_accum", False), ("element_b", ""), ("reads_c", True),
                               ("epilogue_tile", ()), ("mma_in_flight", False), ("direct_store", False),
                               ("staged_store", False), ("lean_mainloop", False),
                               ("raster", 0), ("load_registers", 0)):
            if fields[field] == default:   # keys made before the field existed stay valid
                del fields[field]
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_compiled(self) -> "SparseGemmConfig":
        """This configuration as its binary sees it: the sm90 tile scheduler's swizzle and
        raster order are run-time arguments, so configurations that differ only in them (or
        in a direct_store or staged_store wish not taken) share one kernel."""
        # the direct and staged stores as taken, not as asked: one kernel, one configuration
        return dataclasses.replace(self, swizzle=1, raster=0, direct_store=self.stores_directly,
                                   staged_store=self.stores_staged,
                                   lean_mainloop=self.takes_lean_mainloop) if self.is_3x else self

    @property
    def atom_k(self) -> int:
        """sm90: K of the compressed metadata's layout atom this kernel reads (CUTLASS's
        builder takes min(tile K, 128)); a matrix holds metadata for each atom it is run with."""
        return min(self.threadblock[2], 128)

    @property
    def consumer_registers(self) -> int:
        """Registers each consumer thread of a cooperative kernel keeps after setmaxnreg:
        CUTLASS's 232, or with load_registers what the producer leaves of the CTA's pool,
        in steps of 8."""
        if not self.load_registers:
            return CUTLASS_CONSUMER_REGISTERS
        return (COOPERATIVE_REGISTER_POOL - 128 * self.load_registers) // 256 // 8 * 8

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1] * self.warps[2]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "SparseGemmConfig":
        fields = dict(data)
        for f in ("threadblock", "warps", "instruction", "cluster", "epilogue_tile"):
            if f in fields:   # a description written before the field existed lacks it
                fields[f] = tuple(fields[f])
        return cls(**fields)
