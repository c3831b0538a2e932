"""Thread settings that the batched trainers hold fixed while they compute."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def torch_threads(n):
    """Run the block with PyTorch's intra-op thread count set to `n`, then restore it.

    Matrix products of PyTorch's CPU backend (MKL or oneDNN) may split one product over
    threads in a way that changes its summation order; with one thread the result of a
    product depends only on its operands' shapes and the CPU code path.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
