"""C++ to cubin and back: NVRTC, facts read out of cubins, compiled_cache.db, the kernel
life cycle (load or compile) and warm-up."""
