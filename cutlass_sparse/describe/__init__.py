"""What is asked and what could run it: element types, the Problem value, kernel
configurations on cutlass_library's types, the catalogs and selection. No GPU, no C++."""
