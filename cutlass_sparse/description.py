"""One sparse GEMM kernel configuration, as plain values and as cutlass_library descriptions.

A SparseGemmConfig is what the catalog lists and selection picks: hashable, printable,
its procedural name doubling as identity and C++ symbol. Its properties assemble the
cutlass_library objects (MathInstruction, TileDescription, TensorDescriptions for
A, E, B, C/D, epilogue and swizzle) that the emitter turns into C++.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass

from cutlass_library.gemm_operation import GemmOperation
from cutlass_library.library import (
    DataType,
    EpilogueFunctor,
    GemmKind,
    LayoutType,
    MathInstruction,
    MathOperation,
    OpcodeClass,
    SwizzlingFunctor,
    TensorDescription,
    TileDescription,
)

from . import dtypes

LAYOUTS = {"row": LayoutType.RowMajor, "col": LayoutType.ColumnMajor}
SWIZZLES = {1: SwizzlingFunctor.Identity1, 2: SwizzlingFunctor.Identity2,
            4: SwizzlingFunctor.Identity4, 8: SwizzlingFunctor.Identity8}
EPILOGUES = {"linear_combination": EpilogueFunctor.LinearCombination}


@dataclass(frozen=True)
class SparseGemmConfig:
    """D[M,N] = alpha * A[M,K] (2:4 sparse, row-major) @ B[K,N] + beta * C[M,N] (row-major)."""

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

    def __post_init__(self):
        checks = [
            (self.element in dtypes.INPUT_NAMES, f"element {self.element!r} must be one of {dtypes.INPUT_NAMES}"),
            (self.element_out in (self.element, "f32"), f"element_out {self.element_out!r} must be {self.element!r} or 'f32'"),
            (self.layout_b in LAYOUTS, f"layout_b {self.layout_b!r} must be 'row' or 'col'"),
            (self.swizzle in SWIZZLES, f"swizzle {self.swizzle} must be one of {sorted(SWIZZLES)}"),
            (self.epilogue in EPILOGUES, f"epilogue {self.epilogue!r} must be one of {sorted(EPILOGUES)}"),
            (self.threadblock[2] % 64 == 0, "threadblock K must be a multiple of 64"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    # -- cutlass_library descriptions -------------------------------------------------

    @functools.cached_property
    def math_instruction(self) -> MathInstruction:
        return MathInstruction(list(self.instruction), dtypes.data_type(self.element),
                               dtypes.data_type(self.element), dtypes.data_type(self.accumulator),
                               OpcodeClass.TensorOp, MathOperation.multiply_add)

    @functools.cached_property
    def tile_description(self) -> TileDescription:
        return TileDescription(list(self.threadblock), self.stages, list(self.warps),
                               self.math_instruction, self.min_compute, 1024)

    @property
    def tensor_a(self) -> TensorDescription:
        """The compressed values [M, K/2], row-major."""
        return TensorDescription(dtypes.data_type(self.element), LayoutType.RowMajor, self.alignment_a)

    @property
    def tensor_e(self) -> TensorDescription:
        """Metadata: 16-bit words, 2-bit indices, reordered into ColumnMajorInterleaved<2>."""
        return TensorDescription(DataType.u16, LayoutType.ColumnMajorInterleaved2, 8)

    @property
    def tensor_b(self) -> TensorDescription:
        return TensorDescription(dtypes.data_type(self.element), LAYOUTS[self.layout_b], self.alignment_b)

    @property
    def tensor_c(self) -> TensorDescription:
        return TensorDescription(dtypes.data_type(self.element_out), LayoutType.RowMajor, self.alignment_c)

    @property
    def epilogue_functor(self) -> EpilogueFunctor:
        return EPILOGUES[self.epilogue]

    @property
    def swizzling_functor(self) -> SwizzlingFunctor:
        return SWIZZLES[self.swizzle]

    @functools.cached_property
    def operation(self) -> GemmOperation:
        return GemmOperation(GemmKind.Sparse, self.min_compute, self.tile_description,
                             self.tensor_a, self.tensor_b, self.tensor_c,
                             dtypes.data_type(self.accumulator), self.epilogue_functor,
                             self.swizzling_functor)

    # -- identity ---------------------------------------------------------------------

    @functools.cached_property
    def name(self) -> str:
        """CUTLASS's procedural name, plus what CUTLASS's name leaves out (B/C alignment, swizzle)."""
        name = self.operation.procedural_name()
        if (self.alignment_b, self.alignment_c) != (self.alignment_a, self.alignment_a):
            name += f"_b{self.alignment_b}c{self.alignment_c}"
        return f"{name}_swz{self.swizzle}"

    @functools.cached_property
    def key(self) -> str:
        """Stable short hash of every field."""
        blob = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1] * self.warps[2]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "SparseGemmConfig":
        fields = dict(data)
        for f in ("threadblock", "warps", "instruction"):
            fields[f] = tuple(fields[f])
        return cls(**fields)
