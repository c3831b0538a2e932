"""Synthetic multi-environment classification: an invariant mechanism plus shortcuts.

Every federated client is an *environment*. The label of an example follows one mechanism
shared by all environments -- which arm of a two-armed spiral its first two features lie
on (not linearly separable) -- and, inside each training environment, also a *signature*:
``signature_dims`` further features equal to ``+v_e`` or ``-v_e`` (by label) plus a little
noise, where ``v_e`` is a random direction of environment e. Within a client the signature
predicts the label perfectly and far more easily than the spiral; across clients the
directions disagree, so a model can only use it by memorising every client's direction.
Held-out test environments carry pure noise in the signature features: only the shared
mechanism carries over to them. This is the setting in which Parascandolo et al. (2021)
argue that averaging gradients learns the shortcuts and the AND-mask learns the invariance.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from .._internal.validation import check_flag, check_int

__all__ = ["make_environments", "Environments"]


class Environments(TypedDict):
    """What :func:`make_environments` returns: float32 features, int64 labels, and each
    training client's indices into the training arrays."""

    x_train: np.ndarray
    y_train: np.ndarray
    clients: list[np.ndarray]
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    env_train: np.ndarray


def _spiral(labels, rng, turns, noise):
    """Points on arm `label` (0 or 1) of a two-armed spiral of `turns` turns, radius in [0.1, 1]."""
    t = rng.random(labels.shape[0])
    angle = 2 * np.pi * turns * t + np.pi * labels
    radius = 0.1 + 0.9 * t
    xy = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return xy + noise * rng.standard_normal(xy.shape)


def make_environments(n_clients: int = 53, n_test_clients: int = 10, examples_per_client: int = 200, *,
                      equal_size: bool = True, size_sigma: float = 1.0, min_examples: int = 16,
                      signature_dims: int = 16, signature_scale: float = 1.0, signature_noise: float = 0.1,
                      spiral_turns: float = 1.5, spiral_noise: float = 0.05, validation_fraction: float = 0.2,
                      seed: int = 0) -> Environments:
    """Generate the environments.

    Parameters
    ----------
    n_clients : int
        Training environments (federated clients).
    n_test_clients : int
        Held-out environments, pooled into the test set; their signature features are
        N(0, signature_scale^2 / signature_dims) noise, unrelated to the label.
    examples_per_client : int
        Examples of a client with equal sizes, and the mean size otherwise (before the
        validation split); also the size of each test environment.
    equal_size : bool
        False: client sizes proportional to log-normal(0, `size_sigma`) draws, at least
        `min_examples`, with the same total.
    signature_dims, signature_scale, signature_noise : int, float, float
        Dimension of the signature; length of each environment's direction v_e (drawn
        uniformly on the sphere); standard deviation of the noise added to +-v_e.
    spiral_turns, spiral_noise : float
        Turns of each spiral arm; standard deviation of the noise on the two spiral features.
    validation_fraction : float in [0, 1)
        Fraction of every training client's examples held out as validation data (same
        environments, signatures usable).
    seed : int

    Returns
    -------
    dict with x_train (n, 2 + signature_dims) float32, y_train (n,) int64, clients (list of
    index arrays into x_train), x_val, y_val, x_test, y_test, and env_train (the
    environment of each training row).
    """
    n_clients = check_int(n_clients, "n_clients", low=1)
    n_test_clients = check_int(n_test_clients, "n_test_clients", low=1)
    examples_per_client = check_int(examples_per_client, "examples_per_client", low=2)
    signature_dims = check_int(signature_dims, "signature_dims", low=1)
    min_examples = check_int(min_examples, "min_examples", low=2)
    equal_size = check_flag(equal_size, "equal_size")
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"`validation_fraction` must be in [0, 1); got {validation_fraction}")
    for name, value in (("signature_scale", signature_scale), ("signature_noise", signature_noise),
                        ("spiral_noise", spiral_noise), ("size_sigma", size_sigma)):
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a finite number >= 0; got {value}")
    rng = np.random.default_rng(seed)
    if equal_size:
        sizes = np.full(n_clients, examples_per_client)
    else:
        draws = rng.lognormal(0.0, size_sigma, n_clients)
        sizes = np.maximum(min_examples, np.round(draws / draws.sum() * n_clients * examples_per_client)).astype(int)
    directions = rng.standard_normal((n_clients, signature_dims))
    directions *= signature_scale / np.linalg.norm(directions, axis=1, keepdims=True)

    train_x, train_y, val_x, val_y, env, clients = [], [], [], [], [], []
    offset = 0
    for e, size in enumerate(sizes):
        y = rng.integers(0, 2, size)
        sig = (2 * y[:, None] - 1) * directions[e] + signature_noise * rng.standard_normal((size, signature_dims))
        x = np.hstack([_spiral(y, rng, spiral_turns, spiral_noise), sig])
        n_val = int(round(validation_fraction * size))
        n_val = min(n_val, size - 1)
        train_x.append(x[n_val:])
        train_y.append(y[n_val:])
        val_x.append(x[:n_val])
        val_y.append(y[:n_val])
        env.append(np.full(size - n_val, e))
        clients.append(np.arange(offset, offset + size - n_val))
        offset += size - n_val
    n_test = n_test_clients * examples_per_client
    y_test = rng.integers(0, 2, n_test)
    noise_sig = (signature_scale / np.sqrt(signature_dims)) * rng.standard_normal((n_test, signature_dims))
    x_test = np.hstack([_spiral(y_test, rng, spiral_turns, spiral_noise), noise_sig])

    def f32(parts):
        return np.concatenate(parts).astype(np.float32)

    return {"x_train": f32(train_x), "y_train": np.concatenate(train_y).astype(np.int64), "clients": clients,
            "x_val": f32(val_x), "y_val": np.concatenate(val_y).astype(np.int64),
            "x_test": x_test.astype(np.float32), "y_test": y_test.astype(np.int64),
            "env_train": np.concatenate(env)}
