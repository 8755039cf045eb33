"""build.cubin_trim on real cubins (NVRTC, no GPU). Device variables that no relocation names lose
their symbol-table entries and their names; the code, a __constant__ the launcher reads, the
kernel's own symbol and every other section keep their bytes. ptxas lists a module's variables
in an address table (constant bank 4, one relocation each) while they fit in it (8,000 did,
9,000 did not): the sm90 GEMMs' ~13,000 never fit, so theirs come out, and a module whose
table names its variables keeps them all."""
import numpy as np
import pytest

from cutlass_sparse.build import compiler, cubin, cubin_trim


def _source(variables: int) -> str:
    """A kernel and `variables` instantiations of a variable template that only static_asserts use
    (device variables under -default-device, as CuTe's are in the GEMMs)."""
    checks = "\n".join("static_assert(" + " + ".join(f"v<{i}>" for i in range(j, min(j + 100, variables)))
                       + " >= 0, \"\");" for j in range(0, variables, 100))
    return ("template <int N> constexpr int v = N;\n" + checks + r"""
extern "C" __constant__ int probe_threads = 128;
extern "C" __global__ void probe(int* out) { out[threadIdx.x] = v<3>; }
""")


def _compile(variables: int) -> bytes:
    pytest.importorskip("cuda.bindings.nvrtc")
    return compiler.compile_to_cubin(_source(variables), "probe", compiler.options_for("sm_90a")).cubin


def _symbols(data: bytes) -> dict[str, tuple]:
    found = cubin.sections(data)
    offset, size, strtab, _, _ = found[".symtab"]
    names_at = next(v[0] for v in found.values() if v[4] == strtab)
    out = {}
    for row in np.frombuffer(data, cubin_trim._SYMBOL, size // 24, offset):
        end = data.index(b"\0", names_at + int(row["name"]))
        out.setdefault(data[names_at + int(row["name"]):end].decode(), tuple(row.tolist()))
    return out


def _bytes_of(data: bytes) -> dict[str, bytes]:
    """Each section's bytes but the symbol and string tables' (code, constants, data, .nv.info,
    relocations)."""
    return {name: data[offset:offset + size] for name, (offset, size, *_rest) in cubin.sections(data).items()
            if name not in (".symtab", ".strtab") and not name.startswith(".nv.global")
            or name == ".nv.global.init"}


def _variables(symbols) -> list[str]:
    return [name for name in symbols if name.startswith("_Z1vILi")]


def test_variables_no_relocation_names_lose_their_entries_the_rest_keeps_its_bytes():
    compiled = _compile(9000)
    before = _symbols(compiled)
    assert len(_variables(before)) == 9000   # the compiler made each a device variable
    trimmed = cubin_trim.without_unused_variables(compiled)
    after = _symbols(trimmed)
    assert _variables(after) == []
    for kept in ("probe", "probe_threads"):   # all but where the name sits in the string table
        assert after[kept][1:] == before[kept][1:]
    assert len(trimmed) < len(compiled) - 64_000   # the names left the string table
    assert _bytes_of(trimmed) == _bytes_of(compiled)
    assert cubin.read_int32(trimmed, "probe_threads") == 128
    assert cubin.kernel_param_bytes(trimmed, "probe") == cubin.kernel_param_bytes(compiled, "probe")
    assert cubin_trim.without_unused_variables(trimmed) is trimmed   # twice changes nothing


def test_variables_the_address_table_names_are_all_kept():
    compiled = _compile(10)
    assert ".rela.nv.constant4" in cubin.sections(compiled)
    assert len(_variables(_symbols(compiled))) == 10
    assert cubin_trim.without_unused_variables(compiled) is compiled


def test_bytes_that_are_no_cubin_are_refused():
    with pytest.raises(cubin.CubinError):
        cubin_trim.without_unused_variables(b"not an ELF file at all, just bytes" * 4)
