"""python -m cutlass_sparse.cli ...: the same as the installed `cutlass-sparse` command."""
import sys

from .main import main

sys.exit(main())
