"""The compressed containers: SparseMatrix (one [M, K] matrix) and SparseBatch (a stack).

Each holds values and metadata in one kernel family's layout. The sm80 layout is encoded
and decoded here on the host (sm80_layout); the sm90 layout is CUTLASS's own, produced
and read by GPU kernels, so its codec is handed in from above (api.compress registers
it: formats sits below launching and must not import it).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import events
from ..describe import dtypes
from . import sm80_layout, sm90_layout
from .patterns import LAYOUT_SM80, LAYOUTS

_conversions = threading.Lock()   # SparseMatrix._converted: one conversion per matrix and atom


@dataclass(frozen=True)
class Codec:
    """How to make and read one layout: compress(dense, layout) -> SparseMatrix and
    to_dense(matrix) -> dense."""

    compress: Callable
    to_dense: Callable


_codecs: dict[str, Codec] = {}


def register_codec(layout: str, codec: Codec) -> None:
    _codecs[layout] = codec


def codec(layout: str) -> Codec:
    try:
        return _codecs[layout]
    except KeyError:
        raise ValueError(f"no codec for layout {layout!r}: import cutlass_sparse first") from None


def _cupy_with_gpu(what: str):
    """cupy, where it imports and sees at least one CUDA GPU; else a RuntimeError that says
    which of the two is missing (not an error from deep inside CuPy)."""
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"no CUDA GPU is visible: {what} needs CuPy, which cannot be imported ({exc}); "
                           f"install the cupy-cuda12x package on a machine with a GPU, or keep the matrix "
                           f"on the host") from None
    try:
        count, reason = cupy.cuda.runtime.getDeviceCount(), "CUDA reports 0 devices"
    except Exception as exc:   # CUDARuntimeError: no driver, an old driver, no device
        count, reason = 0, f"CUDA says: {exc}"
    if count == 0:
        raise RuntimeError(f"no CUDA GPU is visible: {what} needs one ({reason}); check the driver and "
                           f"CUDA_VISIBLE_DEVICES, or keep the matrix on the host")
    return cupy


@dataclass
class SparseMatrix:
    """A structured-sparse [M, K] matrix (2:4; 1:2 for tf32), compressed for one kernel family's
    metadata layout."""

    shape: tuple[int, int]          # logical (M, K)
    dtype: np.dtype
    values: object                  # sm80: [M_pad, K_pad/2], numpy or cupy
    metadata: object                # sm80: words [K_pad/(2*16 or 2*32), 2*M_pad] (ColumnMajorInterleaved<2>)
    layout: str = LAYOUT_SM80       # which kernel family's metadata layout this is
    atom_k: int = 128               # sm90: the metadata's layout atom (sm90_layout)
    scales: object = None           # fp8 (cs.quantize_fp8): float32 [M], one dequantization scale per row
    # sm90 8-bit: the K the kernels run, with zero columns up to the layout's multiple of 16
    # (0: K itself); activations get the same zero columns at each call
    padded_k: int = 0
    # sm90: the metadata in other atoms, converted on first use by a kernel that reads them:
    # atom -> (array, event of the conversion or None once seen done, stream pointer)
    _other_atoms: dict = field(default_factory=dict, repr=False, compare=False)

    def _require_sm80(self, what: str) -> None:
        if self.layout != LAYOUT_SM80:
            raise ValueError(f"{what} reads the sm80 layout; this matrix is {self.layout!r}")

    @property
    def padded_shape(self) -> tuple[int, int]:
        """(M, K) of the stored sm80 operand, padding included."""
        self._require_sm80("padded_shape")
        return self.values.shape[0], self.values.shape[1] * 2

    @property
    def is_device(self) -> bool:
        return dtypes.array_module(self.values) is not np

    @property
    def metadata_ld(self) -> int:
        """Leading dimension of the metadata in words (ColumnMajorInterleaved<2>)."""
        return 2 * self.padded_shape[0]

    @property
    def element(self) -> str:
        """The operand type the kernels see ("tf32" for float32)."""
        return dtypes.operand_name(self.dtype)

    def to_device(self) -> "SparseMatrix":
        """This matrix on the current CUDA device (itself if it is there already). Raises
        RuntimeError, before copying anything, where no GPU is visible or CuPy is missing."""
        if self.is_device:
            return self
        cupy = _cupy_with_gpu("SparseMatrix.to_device()")
        return SparseMatrix(self.shape, self.dtype, cupy.asarray(self.values), cupy.asarray(self.metadata),
                            self.layout, self.atom_k, None if self.scales is None else cupy.asarray(self.scales))

    def to_host(self) -> "SparseMatrix":
        """This matrix as NumPy arrays (itself if it is there already)."""
        if not self.is_device:
            return self
        return SparseMatrix(self.shape, self.dtype, self.values.get(), self.metadata.get(), self.layout, self.atom_k,
                            None if self.scales is None else self.scales.get())

    def holds_metadata_for(self, atom_k: int) -> bool:
        """Whether metadata_for(atom_k) is at hand for any stream (no conversion to run or
        to wait for)."""
        if atom_k == self.atom_k or self.layout == LAYOUT_SM80:
            return True
        kept = self._other_atoms.get(atom_k)
        return kept is not None and kept[1] is None

    def metadata_for(self, atom_k: int, stream=None):
        """The metadata in the layout a kernel with this atom K reads (sm90): the stored
        one, or a conversion made once on `stream` (a CuPy stream, the kernel's; default
        the current one) and kept (1/8 of the values' bytes). Until the conversion is seen
        done, a call for another stream has that stream wait for it (an event). Not for a
        stream being captured while a conversion may be running (neither a wait on nor a
        query of an event from outside a capture is allowed in it): see
        launch.sm90_metadata, which gives a capture a conversion of its own."""
        if atom_k == self.atom_k or self.layout == LAYOUT_SM80:
            return self.metadata
        kept = self._other_atoms.get(atom_k)
        if kept is not None and kept[1] is None:
            return kept[0]
        return self._converted(atom_k, stream)

    def _converted(self, atom_k: int, stream):
        import cupy

        stream = stream or cupy.cuda.get_current_stream()
        kept = self._other_atoms.get(atom_k)
        if kept is None:
            if np.dtype(self.dtype).itemsize != 2:   # sm90_layout knows the 16-bit atoms only
                raise ValueError(f"an sm90 {self.dtype} matrix has metadata for tiles of K >= {self.atom_k} "
                                 f"only; a kernel of tile K {atom_k} cannot read it")
            with _conversions:   # one conversion: a second thread's would be freed under its launch
                kept = self._other_atoms.get(atom_k)
                if kept is None:
                    with stream:
                        converted = sm90_layout.convert(self.metadata, *self.shape, self.atom_k, atom_k)
                        done = cupy.cuda.Event(disable_timing=True)
                        done.record(stream)
                    self._other_atoms[atom_k] = (converted, done, stream.ptr)
                    return converted
        converted, done, made_on = kept
        if events.done(done):
            self._other_atoms[atom_k] = (converted, None, made_on)
        elif stream.ptr != made_on:
            stream.wait_event(done)
        return converted

    def plain_metadata(self):
        """The [M_pad, words] metadata before CUTLASS's reorder."""
        self._require_sm80("plain_metadata")
        return sm80_layout.plain_metadata(self.metadata, self.element, *self.padded_shape)

    def to_layout(self, layout: str) -> "SparseMatrix":
        """The same matrix compressed for another kernel family (an explicit conversion)."""
        if not isinstance(layout, str) or layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} must be one of {LAYOUTS}")
        if layout == self.layout:
            return self
        return codec(layout).compress(self.to_dense(), layout)

    def to_dense(self):
        """The [M, K] matrix this represents (numpy or cupy, like the stored values)."""
        if self.layout != LAYOUT_SM80:
            return codec(self.layout).to_dense(self)
        return sm80_layout.decode(self.values, self.metadata, self.element, self.shape, self.dtype)


@dataclass
class SparseBatch:
    """A batch of structured-sparse [M, K] matrices of one shape, compressed (sm80 layout)
    into stacked arrays with one stride per matrix, as CUTLASS's batched mode reads them."""

    shape: tuple[int, int]          # logical (M, K) of each matrix
    dtype: np.dtype
    values: object                  # [batch, M_pad, K_pad/2]
    metadata: object                # [batch, words/2, 2*M_pad]
    layout: str = LAYOUT_SM80

    @property
    def batch(self) -> int:
        return self.values.shape[0]

    def __getitem__(self, i: int) -> SparseMatrix:
        return SparseMatrix(self.shape, self.dtype, self.values[i], self.metadata[i], self.layout)

    @property
    def padded_shape(self) -> tuple[int, int]:
        return self[0].padded_shape

    @property
    def metadata_ld(self) -> int:
        return self[0].metadata_ld

    @property
    def element(self) -> str:
        return dtypes.operand_name(self.dtype)

    @property
    def is_device(self) -> bool:
        return dtypes.array_module(self.values) is not np

    def to_dense(self):
        xp = dtypes.array_module(self.values)
        return xp.stack([self[i].to_dense() for i in range(self.batch)])
