"""Catalogs of sparse GEMM configurations (data, read by cutlass_sparse.catalog).

Installed as the package ``cutlass_sparse.operations`` so an installed copy of the
library finds its default catalog; in a checkout it is read from here.
"""
