"""`without_onednn`: the convolution kernels whose rounding follows the CPU are off inside it.

digits-lenet's frozen body runs under it; its bytes must not depend on which SIMD kernels a
machine has (oneDNN's are compiled for the CPU at hand; NNPACK's run only with AVX2 and FMA3).
"""

import pytest

torch = pytest.importorskip("torch")

from mianalysis._internal.threads import without_onednn  # noqa: E402


def _nnpack_flag():
    """NNPACK's current flag (set_flags returns the previous one; put it back)."""
    (previous,) = torch.backends.nnpack.set_flags(False)
    torch.backends.nnpack.set_flags(previous)
    return previous


def test_onednn_and_nnpack_are_off_inside_and_restored_after():
    torch.backends.mkldnn.enabled = True
    torch.backends.nnpack.set_flags(True)
    with without_onednn():
        assert torch.backends.mkldnn.enabled is False
        assert _nnpack_flag() is False
    assert torch.backends.mkldnn.enabled is True
    assert _nnpack_flag() is True


def test_restored_after_an_error():
    torch.backends.nnpack.set_flags(True)
    with pytest.raises(RuntimeError), without_onednn():
        raise RuntimeError("inside")
    assert torch.backends.mkldnn.enabled is True
    assert _nnpack_flag() is True


def test_a_convolution_inside_is_atens_own():
    """Inside the block a batch-200 stride-1 convolution (which ATen would give NNPACK)
    equals the one computed with both kernels switched off by hand."""
    conv = torch.nn.Conv2d(1, 6, 5)
    x = torch.randn(200, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), without_onednn():
        inside = conv(x)
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch.no_grad(), torch.backends.nnpack.flags(enabled=False):
            by_hand = conv(x)
    finally:
        torch.backends.mkldnn.enabled = before
    assert torch.equal(inside, by_hand)
