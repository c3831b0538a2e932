"""A federated data set: train and test examples, and each client's share of the train set."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class FederatedData:
    """Examples -- images (n, H, W) or feature vectors (n, d) -- and labels of a train and a
    test set, each client's indices into the train set, and optionally a validation set."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    clients: list
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None

    @classmethod
    def digits(cls, n_clients: int, scheme: str = "iid", *, seed: int = 0, mnist_path: str | os.PathLike | None = None,
               validation: float = 0.0, **partition_args: Any) -> FederatedData:
        """Digits (scikit-learn 8x8, or MNIST IDX files) split between `n_clients` clients.

        `validation` (0 <= validation < 1): the share of the training examples held out, before
        the split between clients, as a validation set (stratified by label, drawn by `seed`),
        so that settings can be tuned without looking at the test set; 0 keeps every training
        example for the clients and no validation set (the default).

        Examples
        --------
        >>> from mianalysis.federated import FederatedData
        >>> data = FederatedData.digits(4, validation=0.2)
        >>> len(data.y_val), len(data.y_train), len(data.y_test), int(sum(data.sizes())) == len(data.y_train)
        (252, 1005, 540, True)
        """
        from ..tasks.datasets import load_digit_images
        from .partition import partition

        if isinstance(validation, bool) or not isinstance(validation, (int, float)) or not 0 <= validation < 1:
            raise ValueError(f"`validation` must be a share in [0, 1); got {validation!r}")
        xtr, ytr, xte, yte = load_digit_images(mnist_path, seed)
        xva = yva = None
        if validation > 0:
            from sklearn.model_selection import train_test_split

            xtr, xva, ytr, yva = train_test_split(xtr, ytr, test_size=validation, random_state=seed, stratify=ytr)
        return cls(xtr, ytr, xte, yte, partition(ytr, n_clients, scheme, seed=seed, **partition_args), xva, yva)

    @classmethod
    def environments(cls, **settings: Any) -> FederatedData:
        """The synthetic multi-environment task (mianalysis.federated.environments): training
        environments as clients, validation data from the same environments, test data from
        held-out environments. `settings` go to ``make_environments``."""
        from .environments import make_environments

        d = make_environments(**settings)
        return cls(d["x_train"], d["y_train"], d["x_test"], d["y_test"], d["clients"], d["x_val"], d["y_val"])

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    @property
    def n_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1

    def sizes(self) -> np.ndarray:
        return np.array([len(c) for c in self.clients])


__all__ = ["FederatedData"]
