"""Configurations to CUDA C++: one emitter per kernel kind, the epilogue, argument structs,
strict templates and the NVRTC header patches (emit.registry picks the emitter)."""
