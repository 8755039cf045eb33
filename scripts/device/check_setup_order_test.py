#!/usr/bin/env python3
"""Whether tests/test_gpu_setup_order.py can fail: its tests run with the setup order taken
away (launch.setup_order as it was before session 35: build-ahead in the shared module, no
waits), a few times each; each must fail at least once (exit status 1 if one never did).
Run from the repository root."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_gpu_setup_order as tests  # noqa: E402
from unordered import take_away_setup_order  # noqa: E402

take_away_setup_order()
never = False
for name, call in (("two streams f16", lambda: tests.test_setups_on_two_streams_at_once_each_encode_their_descriptors("f16")),
                   ("two streams bf16", lambda: tests.test_setups_on_two_streams_at_once_each_encode_their_descriptors("bf16")),
                   ("build-ahead beside a call", tests.test_build_ahead_beside_a_calls_setups_encodes_both)):
    failed = 0
    for _ in range(5):
        try:
            call()
        except AssertionError:
            failed += 1
    print(f"without the order, {name}: failed {failed} of 5 runs", flush=True)
    never = never or not failed
sys.exit(1 if never else 0)
