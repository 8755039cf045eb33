"""Issue 4 without a GPU: every epilogue variant and the split-K kernels compile with
NVRTC and expose what the launcher relies on; workspace sizing; argument rules."""
import dataclasses

import pytest

from cutlass_sparse.emit import arguments, epilogue

from cutlass_sparse.describe import catalog

from cutlass_sparse.build import cubin, kernels

from cutlass_sparse.launch import sm80
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.problem import Split
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.describe.description import ACTIVATIONS, SparseGemmConfig
from cutlass_sparse.describe.helper_kernels import ReductionConfig

SMALL = SparseGemmConfig(family="sm80", element="f16", element_out="f16", layout_b="row",
                         threadblock=(64, 64, 64), warps=(2, 2, 1), stages=4, instruction=(16, 8, 32),
                         alignment_a=8, alignment_b=8, alignment_c=8, swizzle=8)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_every_activation_compiles_into_the_sm80_gemm(activation, shared_cache_path):
    config = dataclasses.replace(SMALL, activation=activation)
    assert (activation in config.name) == (activation != "identity")
    compiled = kernels.get(config, "sm_80", KernelCache(shared_cache_path))
    assert cubin.kernel_param_bytes(compiled.cubin, config.name) == arguments.SM80_GEMM.dtype.itemsize
    assert f"::{ACTIVATIONS[activation]}" in kernels.emit(config).source or activation == "identity"


def test_one_universal_kernel_serves_plain_serial_and_parallel_split_k():
    # GemmSparseUniversal picks the mode at run time; K slices are cut on whole tiles.
    source = kernels.emit(SMALL).source
    assert "DefaultGemmSparseUniversal" in source and "params.gemm_k_size = args.slice_k" in source
    assert sm80.k_slices(1024, 64, 3) == (384, 3)      # 16 tiles: 6 + 6 + 4
    assert sm80.k_slices(576, 64, 8) == (128, 5)       # 9 tiles over 8 asked: 2 each, 5 slices
    assert sm80.k_slices(1024, 64, 1) == (1024, 1)


@pytest.mark.parametrize("element_out,alignment", [("f16", 8), ("bf16", 4), ("f32", 4), ("f16", 1)])
@pytest.mark.parametrize("activation", ["identity", "leaky_relu", "silu"])
def test_reduction_kernel_compiles(element_out, alignment, activation, shared_cache_path):
    config = ReductionConfig(element_out, alignment, activation)
    compiled = kernels.get(config, "sm_80", KernelCache(shared_cache_path))
    c = compiled.constants
    assert c["threads"] == 128 and c["rows"] == 4 and c["columns"] == 32 * alignment
    assert cubin.kernel_param_bytes(compiled.cubin, config.name) == arguments.REDUCE_SPLIT_K.dtype.itemsize


def test_leaky_relu_slope_is_set_at_run_time():
    # The slope rides in the functor's Params (2.x) or fusion arguments (3.x), never baked in.
    assert "p.leaky_alpha = args.activation_arg" in epilogue.output_params_2x(
        "OutputOp", "args.alpha", "args.beta", "args.activation_arg", "leaky_relu")
    assert epilogue.set_activation_arg_3x("leaky_relu", "arguments", "args.activation_arg").strip() == \
        "arguments.epilogue.thread.activation.leaky_alpha = args.activation_arg;"
    assert epilogue.set_activation_arg_3x("relu", "arguments", "x") == ""


def test_configurations_refuse_bad_epilogue_and_split_options():
    with pytest.raises(ValueError, match="activation 'swish' must be one of"):
        dataclasses.replace(SMALL, activation="swish")
    fam = catalog.load("sm90")
    sm90 = fam.config(fam.tiles[0], "f16", "f16", "row", 8, 8)
    with pytest.raises(ValueError, match="needs the sm90 'cooperative' schedule"):
        dataclasses.replace(sm90, schedule="pingpong", tile_scheduler="streamk")
    with pytest.raises(ValueError, match="alignment 3"):
        ReductionConfig("f16", 3)


def test_workspace_sizes():
    tile = (128, 128, 64)
    assert sm80.workspace_parts(256, 100, tile, Split()) == (0, 0)
    # serial: one int per output tile (2 x 1 tiles), rounded to 256 bytes
    assert sm80.workspace_parts(256, 100, tile, Split(3, "serial")) == (256, 0)
    # parallel: fp32 partials [slices, M_pad, N padded to 8]
    assert sm80.workspace_parts(256, 100, tile, Split(3, "parallel")) == (0, 3 * 256 * 104 * 4)
    assert sm80.workspace_parts(32, 1, tile, Split(2, "parallel")) == (0, 2 * 32 * 8 * 4)


def test_parallel_split_k_gemm_writes_fp32_partials_without_activation():
    variant = selection.gemm_variant(SMALL, Split(4, "parallel"), "gelu")
    assert (variant.element_out, variant.alignment_c, variant.activation) == ("f32", 4, "identity")
    serial = selection.gemm_variant(SMALL, Split(4, "serial"), "gelu")
    assert serial == dataclasses.replace(SMALL, activation="gelu")
    assert selection.gemm_variant(SMALL, Split(1, "parallel"), "relu") == dataclasses.replace(SMALL, activation="relu")


@pytest.mark.parametrize("element_out,alignment_c", [("s32", 4), ("s32", 1), ("s8", 8)])
def test_int8_kernels_compile_with_32_bit_metadata(element_out, alignment_c, shared_cache_path):
    fam = catalog.load(catalog.for_element("sm80", "s8"))
    config = fam.config(fam.tiles[-1], "s8", element_out, "col", 16, alignment_c)
    assert config.alignment_a == 16 and config.math_instruction.math_operation.name == "multiply_add_saturate"
    source = kernels.emit(config).source
    assert "sizeof(typename Kernel::ElementE) == 4" in source and "kElementsPerElementE == 16" in source
    assert ("LinearCombinationClamp" in source) == (element_out == "s8")
    compiled = kernels.get(config, "sm_80", KernelCache(shared_cache_path))
    assert compiled.shared_bytes > 0


def test_int8_configuration_rules():
    fam = catalog.load("sm80_s8")
    with pytest.raises(ValueError, match="element_out 'f16' must be one of"):
        fam.config(fam.tiles[0], "s8", "f16", "col", 16, 8)
    config = fam.config(fam.tiles[0], "s8", "s32", "col", 16, 4)
    with pytest.raises(ValueError, match="needs a floating-point output"):
        dataclasses.replace(config, activation="relu")
    assert catalog.find(config.name, "sm80") == config


@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_tf32_kernels_compile_with_one_of_two_metadata(layout_b, shared_cache_path):
    fam = catalog.load(catalog.for_element("sm80", "tf32"))
    config = fam.config(fam.tiles[-1], "tf32", "f32", layout_b, 4, 4)
    source = kernels.emit(config).source
    assert "cutlass::tfloat32_t" in source and "kElementsPerElementE == 4" in source
    assert "sizeof(typename Kernel::ElementE) == 2" in source
    assert kernels.get(config, "sm_80", KernelCache(shared_cache_path)).shared_bytes > 0
    with pytest.raises(ValueError, match="element_out 'tf32' must be one of"):
        fam.config(fam.tiles[0], "tf32", "tf32", layout_b, 4, 4)


def test_staging_copy_kernel_compiles_with_an_entry_per_access_width(shared_cache_path):
    """The staging copy (emit.line_copy) compiles for sm_90a without CUTLASS, with one entry
    per access width taking the launcher's argument block, and warm-up ships it."""
    from cutlass_sparse.build import warmup
    from cutlass_sparse.describe.helper_kernels import LineCopyConfig

    config = LineCopyConfig()
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    assert compiled.threads == 256 and compiled.shared_bytes == 0
    for unit in config.UNITS:
        assert cubin.kernel_param_bytes(compiled.cubin, config.entry(unit)) == arguments.LINE_COPY.dtype.itemsize
    assert "#include <cutlass" not in kernels.emit(config).source
    assert (config, "sm_90a") in warmup.catalog_items(["sm_90a"])
    assert warmup._config_from_json(config.to_json()) == config
