"""Splitting a labelled training set between federated clients."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._internal.validation import check_choice, check_int

__all__ = ["PARTITIONS", "partition"]

PARTITIONS = ("iid", "shards", "dirichlet", "unequal")


def partition(labels: ArrayLike, n_clients: int, scheme: str = "iid", *, seed: int = 0, shards_per_client: int = 2,
              alpha: float = 0.5, sigma: float = 1.0) -> list[np.ndarray]:
    """Indices of each client's examples.

    Parameters
    ----------
    labels : array of shape (n_examples,)
    n_clients : int
    scheme : {"iid", "shards", "dirichlet", "unequal"}
        "iid": a random equal split. "shards": the pathological non-IID split of McMahan
        et al. 2017 -- examples sorted by label, cut into ``n_clients * shards_per_client``
        equal shards, each client gets `shards_per_client` random shards (so mostly two
        labels). "dirichlet": for every label, its examples are divided between clients in
        proportions drawn from Dirichlet(`alpha`) (small alpha: few labels per client).
        "unequal": IID labels, client sizes proportional to log-normal(0, `sigma`) draws.
    seed : int

    Returns
    -------
    list of int arrays, one per client, disjoint, covering every example once.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    n_clients = check_int(n_clients, "n_clients", low=1, high=n)
    check_choice(scheme, "scheme", PARTITIONS)
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(n), n_clients)]
    if scheme == "shards":
        shards_per_client = check_int(shards_per_client, "shards_per_client", low=1)
        n_shards = n_clients * shards_per_client
        if n_shards > n:
            raise ValueError(f"{n_shards} shards need at least as many examples; got {n}")
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, n_shards)
        assignment = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in assignment]
    if scheme == "dirichlet":
        if not alpha > 0:
            raise ValueError(f"`alpha` must be > 0; got {alpha}")
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for label in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == label))
            cuts = (np.cumsum(rng.dirichlet(np.full(n_clients, alpha))) * len(idx)).astype(int)[:-1]
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        return _ensure_nonempty(out, rng)
    sizes = rng.lognormal(0.0, sigma, size=n_clients)
    counts = np.maximum(1, np.floor(sizes / sizes.sum() * n).astype(int))
    counts[np.argmax(counts)] += n - counts.sum()
    return [np.sort(part) for part in np.split(rng.permutation(n), np.cumsum(counts)[:-1])]


def _ensure_nonempty(parts, rng):
    """Give every empty client one example from the largest client."""
    for i, part in enumerate(parts):
        if len(part) == 0:
            donor = int(np.argmax([len(p) for p in parts]))
            take = rng.integers(len(parts[donor]))
            parts[i] = parts[donor][take:take + 1]
            parts[donor] = np.delete(parts[donor], take)
    return parts
