"""Plain SGD and Adam steps over a list of tensors, byte for byte those of ``torch.optim``.

The sampler and the digits-lenet pretraining train with these instead of ``torch.optim.SGD``
and ``torch.optim.Adam``: the same arithmetic, operation for operation, in the same order as
PyTorch's implementations with their defaults (no momentum, weight decay, AMSGrad or
maximisation; a Python-number learning rate), so every update is the same bytes
(tests/test_own_optimizers.py checks them against ``torch.optim`` with ``torch.equal`` over
many steps and shapes). They exist because constructing a ``torch.optim`` optimiser imports
``torch._dynamo`` (its ``add_param_group`` and ``step`` are wrapped to disable compilation),
which takes longer than sampling a small dump; these import nothing beyond ``torch``.

Every update is elementwise, so a replica stacked with others gets the same bytes as alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["SGD", "Adam"]


class _Steps:
    """What both optimisers share: the tensors they update, the learning rate, zero_grad."""

    def __init__(self, params: Sequence[torch.Tensor], lr: float) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("an optimiser needs at least one tensor to update; got none")
        self.lr = float(lr)
        if not self.lr > 0:
            raise ValueError(f"`lr` must be a positive number; got {lr!r}")
        self.param_groups: list[dict[str, Any]] = [{"params": self.params, "lr": self.lr}]

    def zero_grad(self) -> None:
        """Forget every tensor's gradient (``.grad = None``), as ``torch.optim`` does by default."""
        for p in self.params:
            p.grad = None

    def _grads(self) -> list[torch.Tensor]:
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise ValueError(f"tensors {missing} have no gradient (.grad is None): set them before step()")
        return [p.grad for p in self.params]  # type: ignore[misc]


class SGD(_Steps):
    """Plain gradient steps p <- p - lr g, as ``torch.optim.SGD(params, lr)``.

    Parameters
    ----------
    params : sequence of torch.Tensor
        The tensors to update; ``step()`` reads their ``.grad``.
    lr : float
        The learning rate, > 0.
    """

    def step(self) -> None:
        """One step with the gradients in ``.grad``."""
        import torch

        with torch.no_grad():
            for p, g in zip(self.params, self._grads()):
                p.add_(g, alpha=-self.lr)


class Adam(_Steps):
    """Adam (Kingma and Ba 2015) as ``torch.optim.Adam(params, lr)`` with its defaults.

    In float32, one tensor operation at a time: m <- lerp(m, g, 1 - b1),
    v <- b2 v + (1 - b2) g g, p <- p + (-lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps),
    the bias corrections computed in double as Python numbers, as PyTorch does.

    Parameters
    ----------
    params : sequence of torch.Tensor
        The tensors to update; ``step()`` reads their ``.grad``.
    lr : float
        The learning rate, > 0.
    betas : (float, float), default=(0.9, 0.999)
    eps : float, default=1e-8

    References
    ----------
    D. P. Kingma and J. Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015,
    arXiv:1412.6980.
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        import torch

        super().__init__(params, lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def step(self) -> None:
        """One step with the gradients in ``.grad``."""
        import torch

        grads = self._grads()
        self.steps += 1
        t = float(self.steps)
        beta1, beta2 = self.betas
        step_size = (self.lr / (1 - beta1**t)) * -1
        bias_correction2_sqrt = (1 - beta2**t) ** 0.5
        with torch.no_grad():
            for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2)
                v.addcmul_(g, g, value=1 - beta2)
                denom = torch.sqrt(v)
                denom.div_(bias_correction2_sqrt)
                denom.add_(self.eps)
                p.addcdiv_(m, denom, value=step_size)
