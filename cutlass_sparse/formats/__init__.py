"""Host-side sparse formats: 2:4 patterns, pruning, the sm80 compressed layout, and the
SparseMatrix / SparseBatch containers."""
