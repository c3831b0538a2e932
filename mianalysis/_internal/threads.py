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


@contextmanager
def without_onednn():
    """Run the block with PyTorch's oneDNN (mkldnn) and NNPACK kernels switched off, then
    restore them.

    oneDNN compiles its convolution kernels for the CPU it runs on (AVX-512, AVX2, SSE4.1),
    whatever ``ATEN_CPU_CAPABILITY`` says, so their rounding follows the machine. NNPACK,
    which ATen picks next for a stride-1 convolution of a batch of 16 or more, runs only
    where the CPU has AVX2 and FMA3 (elsewhere ATen's own kernels run), and its Winograd
    and FFT kernels round differently from those. Without both, a convolution runs
    through ATen's own kernels and a matrix product (MKL), whose code path
    ``ATEN_CPU_CAPABILITY`` and ``MKL_CBWR`` fix: the same bytes on every x86-64 CPU on the
    baseline path.
    """
    import torch

    before = torch.backends.mkldnn.enabled
    # torch annotates the flag as its ContextProp descriptor, whose __set__ takes a bool.
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]
    try:
        with torch.backends.nnpack.flags(enabled=False):
            yield
    finally:
        torch.backends.mkldnn.enabled = before


@contextmanager
def single_threaded(*, torch=False):
    """Run the block with every thread pool this process computes with limited to one thread.

    A Dask worker runs each of its tasks under this: one Dask thread per worker and one
    thread inside each task, so that a task computes what the same call computes in a
    single-threaded process. BLAS and OpenMP pools (threadpoolctl), Numba's parallel
    kernels (``numba.set_num_threads``, which holds for the calling thread) and, with
    ``torch=True`` or when PyTorch is already imported, PyTorch's intra-op threads are set to 1 and restored afterwards.
    """
    import sys
    from contextlib import ExitStack

    import numba
    from threadpoolctl import threadpool_limits

    with ExitStack() as stack:
        stack.enter_context(threadpool_limits(limits=1))
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        stack.callback(numba.set_num_threads, before)
        if torch or "torch" in sys.modules:
            stack.enter_context(torch_threads(1))
        yield
