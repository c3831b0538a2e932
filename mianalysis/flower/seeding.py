"""Seeding the process's global random generators for one call of a Flower app, then restoring them."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator

import numpy as np

from .._seeding import replica_seed

# The last word of the seed of a ServerApp call; a ClientApp call's are (partition, message).
SERVER_STREAM = 0
CLIENT_STREAM = 1


@contextlib.contextmanager
def seeded_globals(*words: int) -> Iterator[None]:
    """Seed Python's ``random``, NumPy's legacy global generator and (when imported)
    PyTorch's CPU generator from `words` (:func:`mianalysis.sampling.replica_seed`)
    inside the block; their previous states are restored after it.

    This is how a seed reaches an app that draws from these generators without reading
    any seed itself (``torch.nn.Linear(...)``'s initialisation, ``np.random.rand()``,
    ``DataLoader(shuffle=True)``): every call gets its own stream, a function of `words`.
    Generators the app makes itself (``np.random.default_rng()`` without a seed,
    ``torch.Generator()`` without ``manual_seed``) are not reached.
    """
    seed = replica_seed(*words)
    torch = sys.modules.get("torch")  # only an app that uses PyTorch has imported it
    saved = (random.getstate(), np.random.get_state(), None if torch is None else torch.get_rng_state())
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if torch is not None:
        torch.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if torch is not None and saved[2] is not None:
            torch.set_rng_state(saved[2])


__all__ = ["seeded_globals", "SERVER_STREAM", "CLIENT_STREAM"]
