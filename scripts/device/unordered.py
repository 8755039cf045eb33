"""The sm90 setups as they ran before session 35, for A/B runs and to show that a test can
fail: build-ahead's in the shared module, and no setup waiting for another stream's
(launch.setup_order). Setups of one module may then overlap, and a GEMM may fault."""


def take_away_setup_order() -> None:
    from cutlass_sparse.launch import setup_order

    setup_order.AHEAD = setup_order.CAPTURED = 0
    setup_order.queue = lambda key, stream, launch: launch()
