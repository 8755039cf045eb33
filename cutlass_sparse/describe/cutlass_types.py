"""A sparse GEMM configuration as cutlass_library's objects: MathInstruction,
TileDescription, TensorDescriptions for A, E, B and C/D, the epilogue functor, the swizzle,
the sm90 schedules, and the GemmOperation whose procedural name the configuration's name
starts from. A mixin of SparseGemmConfig (description.py), which holds the plain values.
"""
from __future__ import annotations

import functools

from cutlass_library.gemm_operation import GemmOperation
from cutlass_library.library import (
    DataType,
    EpilogueFunctor,
    EpilogueScheduleType,
    GemmKind,
    KernelScheduleType,
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
# sm90 warp-specialized schedules: (kernel schedule, epilogue schedule) in cutlass_library terms.
SCHEDULES = {
    "cooperative": (KernelScheduleType.TmaWarpSpecializedCooperative, EpilogueScheduleType.TmaWarpSpecializedCooperative),
    "pingpong": (KernelScheduleType.TmaWarpSpecializedPingpong, EpilogueScheduleType.TmaWarpSpecialized),
}
FAST_ACCUM = {
    KernelScheduleType.TmaWarpSpecializedCooperative: KernelScheduleType.TmaWarpSpecializedCooperativeFP8FastAccum,
    KernelScheduleType.TmaWarpSpecializedPingpong: KernelScheduleType.TmaWarpSpecializedPingpongFP8FastAccum,
}


class CutlassDescriptions:
    """cutlass_library's descriptions of a SparseGemmConfig (it supplies the fields, is_3x,
    b_element and stores_directly)."""

    @functools.cached_property
    def math_instruction(self) -> MathInstruction:
        opcode = OpcodeClass.SparseTensorOp if self.is_3x else OpcodeClass.TensorOp
        return MathInstruction(list(self.instruction), dtypes.data_type(self.element),
                               dtypes.data_type(self.b_element), dtypes.data_type(self.accumulator),
                               opcode, MathOperation.multiply_add_saturate if self.element == "s8"
                               else MathOperation.multiply_add)

    @functools.cached_property
    def tile_description(self) -> TileDescription:
        return TileDescription(list(self.threadblock), self.stages, list(self.warps),
                               self.math_instruction, self.min_compute,
                               self.min_compute if self.is_3x else 1024, list(self.cluster))

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
        return TensorDescription(dtypes.data_type(self.b_element), LAYOUTS[self.layout_b], self.alignment_b)

    @property
    def tensor_c(self) -> TensorDescription:
        return TensorDescription(dtypes.data_type(self.element_out), LAYOUTS[self.layout_c], self.alignment_c)

    @property
    def epilogue_functor(self) -> EpilogueFunctor:
        return EPILOGUES[self.epilogue]

    @property
    def swizzling_functor(self) -> SwizzlingFunctor:
        return SWIZZLES[self.swizzle]

    @functools.cached_property
    def operation(self) -> GemmOperation:
        if self.is_3x:
            kernel_schedule, epilogue_schedule = self.schedules
            return GemmOperation(GemmKind.SparseUniversal3x, self.min_compute, self.tile_description,
                                 self.tensor_a, self.tensor_b, self.tensor_c,
                                 dtypes.data_type(self.accumulator), self.epilogue_functor,
                                 SwizzlingFunctor.Identity1, kernel_schedule=kernel_schedule,
                                 epilogue_schedule=epilogue_schedule)
        return GemmOperation(GemmKind.Sparse, self.min_compute, self.tile_description,
                             self.tensor_a, self.tensor_b, self.tensor_c,
                             dtypes.data_type(self.accumulator), self.epilogue_functor,
                             self.swizzling_functor)

    @property
    def schedules(self) -> tuple[KernelScheduleType, EpilogueScheduleType]:
        """(kernel, epilogue) schedule of an sm90 configuration, fast accumulation applied."""
        kernel_schedule, epilogue_schedule = SCHEDULES[self.schedule]
        if self.fast_accum:
            kernel_schedule = FAST_ACCUM[kernel_schedule]
        if self.stores_directly:
            epilogue_schedule = EpilogueScheduleType.NoSmemWarpSpecialized
        return kernel_schedule, epilogue_schedule
