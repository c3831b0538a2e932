"""Seeding the process's global random generators for one call of a Flower app, then restoring them."""

from __future__ import annotations

import contextlib
import importlib.util
import random
import sys
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from .._internal.seeding import replica_seed

# The last word of the seed of a ServerApp call; a ClientApp call's are (partition, message).
SERVER_STREAM = 0
CLIENT_STREAM = 1


def _torch() -> ModuleType | None:
    """PyTorch, imported if it is installed (None otherwise). An app that imports it only
    inside its handler must find its generator seeded too, so it cannot wait for the app:
    the import (a second or two) is paid once per process, by the first call."""
    torch = sys.modules.get("torch")
    if torch is None and importlib.util.find_spec("torch") is not None:
        import torch
    return torch


@contextlib.contextmanager
def seeded_globals(*words: int) -> Iterator[None]:
    """Seed Python's ``random``, NumPy's legacy global generator and (when installed)
    PyTorch's CPU generator from `words` (:func:`mianalysis.sampling.replica_seed`)
    inside the block; their previous states are restored after it.

    This is how a seed reaches an app that draws from these generators without reading
    any seed itself (``torch.nn.Linear(...)``'s initialisation, ``np.random.rand()``,
    ``DataLoader(shuffle=True)``): every call gets its own stream, a function of `words`.
    PyTorch is imported here when installed, so that an app importing it inside its
    handler is seeded from its first call on. Its CUDA generators are seeded (and
    restored) only when CUDA is already initialised in the process: a CUDA first
    initialised inside the block starts from PyTorch's default seed, never from `words`,
    and no seed is left queued for a later initialisation. Generators the app makes
    itself (``np.random.default_rng()`` without a seed, ``torch.Generator()`` without
    ``manual_seed``) are not reached.
    """
    seed = replica_seed(*words)
    torch = _torch()
    cuda = torch is not None and hasattr(torch, "cuda") and bool(torch.cuda.is_initialized())
    saved = (random.getstate(), np.random.get_state(), None if torch is None else torch.get_rng_state(),
             torch.cuda.get_rng_state_all() if torch is not None and cuda else None)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if torch is not None:
        torch.default_generator.manual_seed(seed)  # not torch.manual_seed: it queues a CUDA seed too
        if cuda:
            torch.cuda.manual_seed_all(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if torch is not None and saved[2] is not None:
            torch.set_rng_state(saved[2])
        if torch is not None and saved[3] is not None:
            torch.cuda.set_rng_state_all(saved[3])


__all__ = ["seeded_globals", "SERVER_STREAM", "CLIENT_STREAM"]
