"""The public calls: operand checks that build a Problem, matmul, linear, batches, plans,
compression."""
