"""The `cutlass-sparse` command line (run | bench | warmup | cache): cli.main is the entry.

The top floor of the package: it may import anything below and nothing imports it.
"""
