"""Problem -> family plan: the kernel choice (a caller's config, a profiler record or the
heuristic) and a bounded cache of plans that eager calls hit."""
