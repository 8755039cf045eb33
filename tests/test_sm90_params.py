"""Host copies of sm90 Params (launch.sm90_params): finding each pointer's word and
patching a copy, against a stand-in for the device's setup (no GPU needed)."""
import ctypes
import struct


from cutlass_sparse.launch import sm90_params

WORDS = 24


def fake_setup(layout):
    """A setup that writes each pointer i into word layout[i] (None: not at all; a tuple:
    each of those words), beside words that do not depend on the pointers."""
    def run_setup(pointers):
        words = [7 * w + 1 for w in range(WORDS)]
        for i, word in enumerate(layout):
            for w in () if word is None else word if isinstance(word, tuple) else (word,):
                words[w] = pointers[i]
        return struct.pack(f"<{WORDS}Q", *words)
    return run_setup


def test_each_pointer_is_found_in_its_word():
    layout = (8, 4, 11, None, 20)
    offsets = sm90_params.find_pointer_map(fake_setup(layout), 5, 0x7F0000000000)
    assert offsets == ((64,), (32,), (88,), (), (160,))


def test_a_pointer_stored_any_other_way_gives_no_map():
    def shifted(pointers):   # pointer 1 stored shifted: not a plain word
        words = [0] * WORDS
        words[2], words[5] = pointers[0], pointers[1] >> 4
        return struct.pack(f"<{WORDS}Q", *words)

    assert sm90_params.find_pointer_map(shifted, 2, 0x7F0000000000) is None

    def offset(pointers):    # pointer 0 stored with an offset: moves with it, but patching would lose the offset
        words = [0] * WORDS
        words[2] = pointers[0] + 256
        return struct.pack(f"<{WORDS}Q", *words)

    assert sm90_params.find_pointer_map(offset, 1, 0x7F0000000000) is None
    assert "pointer 0" in sm90_params.failures[1]


def test_a_pointer_in_two_words_is_found_in_both():
    """A stream-K kernel's Params hold its workspace twice (GemmUniversal's own and its
    scheduler's reduction workspace): both words are the pointer's, both get patched."""
    layout = (8, 4, 11, None, 20, None, None, None, (3, 17))
    run_setup = fake_setup(layout)
    offsets = sm90_params.find_pointer_map(run_setup, sm90_params.WORKSPACE + 1, 0x7F0000000000)
    assert offsets[sm90_params.WORKSPACE] == (24, 136) and offsets[:5] == ((64,), (32,), (88,), (), (160,))
    host = sm90_params.HostParams(run_setup((0x1000,) * 9), offsets)
    new = (0x10, 0x20, 0x30, 0x40, 0x50, 0, 0, 0, 0x7F00AB000000)
    address, _ = host.record(new)
    params = ctypes.c_void_p.from_address(address).value
    assert ctypes.string_at(params, WORDS * 8) == run_setup(new)


def test_patched_copy_equals_a_setup_with_those_pointers():
    """HostParams gives, for each pointer set, exactly the Params a setup with those
    pointers builds, as a record of its own: its one buffer is patched again for the next
    set, and an earlier record (kept by a Ready, or in a captured graph's launch) stays
    as it was."""
    layout = (8, 4, 11, None, 20)
    run_setup = fake_setup(layout)
    offsets = sm90_params.find_pointer_map(run_setup, 5, 0x7F0000000000)
    host = sm90_params.HostParams(run_setup((0x1000, 0x2000, 0x3000, 0x4000, 0x5000)), offsets)
    sets = ((0x7F00DEAD0000, 0x7F00BEEF0000, 0x10, 0x20, 0x30), (0x40, 0x50, 0x60, 0x70, 0x80))
    records = [host.record(new) for new in sets]   # (kernelParams address, the buffer holding it)
    for new, (address, _) in zip(sets, records):
        params = ctypes.c_void_p.from_address(address).value   # kernelParams[0]: the Params record
        assert ctypes.string_at(params, len(run_setup(new))) == run_setup(new)


def test_a_range_comes_back_in_one_copy():
    """build_ahead's Templates share one Copy: each reads its own slot once the copy has
    landed, none before, and the pinned buffer goes with the last of them."""
    import ctypes

    class FakeCopy:
        def __init__(self, data):
            self.buffer = ctypes.create_string_buffer(data, len(data))
            self.done = False

        def landed(self, stream=None):
            return ctypes.addressof(self.buffer) if self.done else None

    slots = [bytes([i]) * 40 for i in range(3)]
    copy = FakeCopy(b"".join(slot + bytes(24) for slot in slots))
    made = [sm90_params.Template(copy, 64 * i, 40) for i in range(3)]
    assert all(t.arrived() is None for t in made)
    copy.done = True
    assert [t.arrived() for t in made] == slots
    assert all(t._copy is None for t in made)


def stale_setup(layout, stale_word):
    """A setup whose Params padding (stale_word) holds what the previous setup left on the
    stack: the previous call's pointer 0, as the H100's setups did with leftovers of
    earlier kernels."""
    previous = [0x1234]

    def run_setup(pointers):
        words = [7 * w + 1 for w in range(WORDS)]
        for i, word in enumerate(layout):
            words[word] = pointers[i]
        words[stale_word] = previous[0]
        previous[0] = pointers[0]
        return struct.pack(f"<{WORDS}Q", *words)
    return run_setup


def test_stack_leftovers_in_padding_do_not_refuse_the_map():
    layout = (8, 4, 11, 13, 20)
    assert sm90_params.find_pointer_map(stale_setup(layout, 2), 5, 0x7F0000000000) == (
        (64,), (32,), (88,), (104,), (160,))


def test_a_second_use_of_a_pointer_is_refused_even_among_leftovers():
    def derived(pointers, inner=stale_setup((8, 4, 11, 13, 20), 2)):
        words = list(struct.unpack(f"<{WORDS}Q", inner(pointers)))
        words[17] = pointers[3] + 128     # e.g. an address derived from the pointer: always moves with it
        return struct.pack(f"<{WORDS}Q", *words)

    assert sm90_params.find_pointer_map(derived, 5, 0x7F0000000000) is None
    assert "pointer 3" in sm90_params.failures[5]


def test_kernel_params_point_at_the_arguments():
    """launch.pdl passes a GEMM's two arguments as an array of their addresses:
    the Params record (by value) and the from_device pointer (null for by-value Params)."""
    from cutlass_sparse.launch import pdl

    record = (ctypes.c_char * 64).from_buffer_copy(bytes(range(64)))
    params = pdl.kernel_params(record, pdl.NULL)
    assert len(params) == 2
    assert ctypes.string_at(params[0], 64) == bytes(range(64))
    assert ctypes.c_uint64.from_address(params[1]).value == 0


def test_a_host_record_holds_its_own_kernel_params():
    """HostParams.record: Params, a null from_device and the kernelParams array of their
    two addresses, in one buffer of its own."""
    arrived = bytes(range(100))
    host = sm90_params.HostParams(arrived, ((8,), (), (), (), ()))
    address, record = host.record((0x1111, 0, 0, 0, 0))
    params, from_device = (ctypes.c_void_p * 2).from_address(address)
    assert params == ctypes.addressof(record) and params <= from_device < address < params + ctypes.sizeof(record)
    assert ctypes.c_uint64.from_address(from_device).value == 0 and from_device % 8 == 0
    assert ctypes.string_at(params, 100) == arrived[:8] + (0x1111).to_bytes(8, "little") + arrived[16:]


def test_an_evicted_template_keeps_its_copy_until_it_lands(monkeypatch):
    """A Template evicted before its device-to-host copy landed must not drop the Copy: its
    pinned memory would go back to CuPy's pinned pool (which checks no events) while the DMA
    still writes into it (review of session 19, item 12)."""
    from cutlass_sparse.launch import sm90_params

    class Pending:
        landed_yet = False

        def done(self):
            return self.landed_yet

    monkeypatch.setattr(sm90_params, "MAX_TEMPLATES", 1)
    monkeypatch.setattr(sm90_params, "_templates", sm90_params.OrderedDict())
    monkeypatch.setattr(sm90_params, "_in_flight", [])
    first, landed = Pending(), Pending()
    landed.landed_yet = True
    sm90_params._keep(("a",), sm90_params.Template(first, 0, 8))
    sm90_params._keep(("b",), sm90_params.Template(landed, 0, 8))   # evicts a: not landed, kept
    assert sm90_params._in_flight == [first] and sm90_params.template(("a",)) is None
    sm90_params._keep(("c",), sm90_params.Template(Pending(), 0, 8))   # evicts b: landed, dropped
    assert sm90_params._in_flight[0] is first and landed not in sm90_params._in_flight
    first.landed_yet = True
    sm90_params._keep(("d",), sm90_params.Template(landed, 0, 8))
    assert first not in sm90_params._in_flight


def test_params_that_kept_a_tma_recipe_never_launch():
    """A setup that lost its nonce to another one running at once leaves a TMA recipe (its
    mark in the descriptor's first word, where the pointer map has the address) instead of
    an encoded descriptor: such Params are refused (session 35's illegal instruction). A
    recipe's mark left in padding, which no pointer word covers, is not a descriptor."""
    from cutlass_sparse.launch import tma

    layout = (8, 4, 11, None, 20)
    run_setup = fake_setup(layout)
    offsets = sm90_params.find_pointer_map(run_setup, 5, 0x7F0000000000)
    good = run_setup((0x1000, 0x2000, 0x3000, 0x4000, 0x5000))
    assert sm90_params.encoded(good, offsets)
    mark = struct.pack("<Q", tma.MAGIC)
    in_padding = good[:8 * 6] + mark + good[8 * 7:]
    assert sm90_params.encoded(in_padding, offsets)
    for word in (4, 20):   # b's and d's descriptors left as recipes
        assert not sm90_params.encoded(good[:8 * word] + mark + good[8 * word + 8:], offsets)


def test_a_plan_refuses_host_params_that_kept_a_recipe(monkeypatch):
    """Sm90Plan._from_host with an arrived copy whose descriptor word holds a recipe's mark:
    no launch (None), nothing kept, and the copy forgotten (plan and table) so the shape's
    next setup brings a new one."""
    import types

    from cutlass_sparse.launch import tma
    from cutlass_sparse.launch.sm90 import NO_VECTORS, Sm90Plan

    layout = (8, 4, 11, None, 20)
    run_setup = fake_setup(layout)
    offsets = sm90_params.find_pointer_map(run_setup, 5, 0x7F0000000000)
    good = run_setup((0x1000, 0x2000, 0x3000, 0x4000, 0x5000))
    bad = good[:8 * 4] + struct.pack("<Q", tma.MAGIC) + good[8 * 5:]

    class Arrived:
        def __init__(self, params):
            self.params = params

        def arrived(self, stream=None):
            return self.params

    plan = Sm90Plan.__new__(Sm90Plan)
    plan.compiled, plan.problem = types.SimpleNamespace(key="kernel"), types.SimpleNamespace(device_id=0)
    plan._block_key, plan._host_params, plan._templates = b"block", {}, {}
    pointers = (0x10, 0x20, 0x30, 0x40, 0x50)
    monkeypatch.setattr(sm90_params, "pointer_maps", {("kernel", 0): offsets})
    monkeypatch.setattr(sm90_params, "_templates", sm90_params.OrderedDict())
    key = plan._host_key(pointers, NO_VECTORS)
    sm90_params._templates[key] = Arrived(bad)
    plan.expect_host_params(pointers, NO_VECTORS, Arrived(bad))
    refused = sm90_params.refused
    assert plan._from_host(pointers, NO_VECTORS, None) is None
    assert plan._host_params == {} and plan._templates == {} and key not in sm90_params._templates
    assert sm90_params.refused == refused + 1
