"""Cubins on the GPU: module loading, argument blocks, TMA descriptors and the per-family
launchers, each made once per Problem (a family plan) and run with pointers."""
