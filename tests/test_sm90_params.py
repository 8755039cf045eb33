"""Params by value (launch.sm90_params), without a GPU: the pointer map found from setups
with moved pointers, and a template patched for new pointers, on a fake Params layout
with raw pointers and descriptor address fields (stored shifted right by 4)."""
import struct

import numpy as np

from cutlass_sparse.launch import sm90_params

SIZE = 256
# (byte offset, pointer index, shift): a raw pointer, a descriptor address field, ...
LAYOUT = ((0, 0, 0), (16, 1, 0), (64, 2, 4), (128, 3, 4), (192, 4, 4), (200, 4, 0))


class Array:
    """What the map needs of a device array: .get() -> host bytes."""

    def __init__(self, data: bytes):
        self.data = np.frombuffer(data, dtype=np.uint8)

    def get(self):
        return self.data.copy()


def fake_params(pointers) -> bytes:
    block = bytearray(b"\x5a" * SIZE)   # other fields: anything, the same for every call
    for offset, i, shift in LAYOUT:
        struct.pack_into("<Q", block, offset, (pointers[i] >> shift) | (7 << 60 if shift else 0))
    return bytes(block)


def test_map_finds_every_pointer_word():
    base = tuple(0x7F0000000000 + 256 * i for i in range(5))
    mapping = sm90_params.pointer_map(lambda p: Array(fake_params(p)), SIZE, base)
    assert sorted(mapping.words) == sorted(LAYOUT)


def test_no_map_when_a_change_is_not_a_shifted_pointer():
    def odd(pointers):    # a field that depends on a pointer's low bits only: not patchable
        block = bytearray(fake_params(pointers))
        struct.pack_into("<Q", block, 240, pointers[2] % 4099)
        return Array(bytes(block))

    assert sm90_params.pointer_map(odd, SIZE, tuple(0x7F0000000000 + 256 * i for i in range(5))) is None


def test_patched_template_equals_params_built_for_the_new_pointers():
    base = tuple(0x7F0000000000 + 256 * i for i in range(5))
    mapping = sm90_params.pointer_map(lambda p: Array(fake_params(p)), SIZE, base)
    template = sm90_params.Template.__new__(sm90_params.Template)
    template.pointers, template.nbytes = base, SIZE
    template.bytes = fake_params(base)
    for new in ((0x7F1000000000, 0x7F0000000100, 0x7E0000000200, 0x7F0000004000, 0x7F0000004000),
                tuple(p - 0x10000 for p in base)):
        record = template.patched(mapping, new)
        assert bytes(record.tobytes()) == fake_params(new)
    assert template.patched(mapping, (base[0], base[1], base[2] + 8, base[3], base[4])) is None   # 8 >> 4
