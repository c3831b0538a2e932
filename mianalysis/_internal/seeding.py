"""Seeds derived from tuples of integers, shared by the sampler and the simulator."""

from __future__ import annotations

import numpy as np


def replica_seed(*words):
    """A 63-bit seed derived from integers (seed, run, stream) by NumPy's SeedSequence."""
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(1, np.uint64)[0] >> np.uint64(1))
