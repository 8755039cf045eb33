"""The profiler: its records (low, so planning can read them) and its timing loop (above
planning, below the public calls)."""
