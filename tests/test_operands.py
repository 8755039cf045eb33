"""The argument rules of issue 4 without a GPU: each bad option raises an error that
names the argument and the rule."""
import pytest

from cutlass_sparse.api import options


@pytest.mark.parametrize("split_k", [0, -1, 2.5, True, "2"])
def test_split_k_must_be_a_positive_integer(split_k):
    with pytest.raises(ValueError, match="split_k must be an integer >= 1"):
        options.check_split_k(split_k, None, "sm80")


def test_split_k_modes_per_family():
    assert options.check_split_k(4, "parallel", "sm80") == (4, "parallel")
    assert options.check_split_k(None, None, "sm90") == (None, None)
    with pytest.raises(ValueError, match="split_k_mode 'tree' must be 'serial' or 'parallel'"):
        options.check_split_k(2, "tree", "sm80")
    with pytest.raises(ValueError, match="'parallel' is not offered by the sm90 family"):
        options.check_split_k(2, "parallel", "sm90")


def test_activation_names_and_slope():
    options.check_activation("gelu_tanh", 0.01)
    with pytest.raises(ValueError, match="activation 'swish' is not one of"):
        options.check_activation("swish", 0.01)
    with pytest.raises(ValueError, match="leaky_slope must be finite"):
        options.check_activation("leaky_relu", float("nan"))


def test_output_types_per_operand_type():
    assert options.output_type("f16", None) == "f16"
    assert options.output_type("bf16", "float32") == "f32"
    assert options.output_type("s8", None) == "s32"
    assert options.output_type("s8", "int8") == "s8"
    assert options.output_type("tf32", None) == "f32"
    with pytest.raises(ValueError, match="out_dtype 'bf16': f16 inputs give one of"):
        options.output_type("f16", "bf16")
    with pytest.raises(ValueError, match="out_dtype 'f16': tf32 inputs give one of"):
        options.output_type("tf32", "f16")


def test_int8_rules():
    options.check_int8("s32", "identity", 4, "serial")
    with pytest.raises(ValueError, match="needs a floating-point output"):
        options.check_int8("s32", "gelu", None, None)
    with pytest.raises(ValueError, match="int8 split-K: serial with an int32 output only"):
        options.check_int8("s8", "identity", 2, None)
