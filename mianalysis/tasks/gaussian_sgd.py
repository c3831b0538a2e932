"""gaussian-sgd: noisy gradient descent on quadratic losses, whose exact MI is known."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.validation import ChoiceSetting, IntSetting, RangeSetting, RealSetting
from .base import INIT_MODES, ClientBatchData, ReplicaGenerators, Task, check_shared

if TYPE_CHECKING:  # names used only in type hints
    import torch
from .linear_gaussian import cross_covariances, gaussian_mi_from_blocks

__all__ = ["TRANSFORMS", "GaussianSGDTask"]

TRANSFORMS = ("none", "sinh", "cubic")


def _times(matrices, vectors):
    """``matrices @ vectors`` row by row, (..., d, d) times (..., d) -> (..., d), as a product
    and a sum over the last axis rather than a BLAS matrix product.

    A BLAS product (``torch.bmm``, ``@``) picks its kernel from the batch size, the thread
    count and the CPU (a batch of one runs as a matrix-vector product, more threads split
    the batch into other blocks), so a run's bytes would depend on the chunk it is trained
    in and on the threads. ATen's sum adds each row's products in an order fixed by the row
    length and the code path (``ATEN_CPU_CAPABILITY``) alone.
    """
    return (matrices * vectors[..., None, :]).sum(-1)


class GaussianSGDTask(Task):
    """Plain SGD on ``0.5 (theta - mu_k)^T A_k (theta - mu_k)``: the ground-truth task.

    Client k has a fixed curvature ``A_k = Q_k diag(lambda_k) Q_k^T`` (eigenvalues drawn
    uniformly from `eigenvalues`, ``Q_k`` a random rotation, or the identity with
    ``curvature="diagonal"``) and a fixed mean ``m_k ~ N(0, I)``, both from `data_seed`.
    Every run draws the client's target ``mu_k = m_k + tau z_k`` (``z_k ~ N(0, I)``: the
    "data" stream, the analogue of drawing the client's data) and takes `n_iterations`
    steps ``theta <- theta - eta (A_k (theta - mu_k) + sigma xi)`` from
    ``theta_0 ~ N(m0, s0^2 I)`` (``init="per-run"``) or ``theta_0 = m0`` (``init="fixed"``).
    The gradient noise (the "noise" stream) is ``xi_k = sqrt(rho) zeta + sqrt(1 - rho)
    eps_k``, ``zeta`` common to the clients of a run and ``eps_k`` the client's own: `rho`
    is the correlation of the clients' noise. Sharing the "noise" stream makes the noise
    identical (as rho = 1); sharing "data" gives every client of a run the same ``z``.

    Every checkpoint is jointly Gaussian across clients, and :meth:`exact_mi` gives the
    exact MI of any two clients from the closed form (:mod:`.linear_gaussian`). The
    recorded parameters are ``f(theta)`` with `transform` applied to every coordinate:
    "none", "sinh" or "cubic" (``x + x^3``). Both maps are strictly monotone, so the MI
    is unchanged while the samples are no longer Gaussian.

    The "loss" metric is ``0.5 (theta - mu_k)^T A_k (theta - mu_k)`` without noise.

    `heterogeneity` h in [0, 1] moves every client's problem towards the clients' average:
    ``A_k <- (1 - h) mean_j A_j + h A_k`` and ``m_k <- (1 - h) mean_j m_j + h m_k``. With
    h = 1 (the default) the problems are the ones above, byte for byte; with h = 0 every
    client has the same curvature and mean (the negative control of
    :mod:`mianalysis.analysis.studies.headroom`). The eigenvalues of a blend stay within `eigenvalues`, so
    the descent stays stable. The setting is recorded in a task's settings only when it is
    not 1, so dumps made before it existed resume.

    The federation's reference in a run is :meth:`central_parameters`: the minimiser
    ``theta* = (sum_k A_k)^-1 sum_k A_k mu_k`` of the summed losses of that run's targets,
    recomputed from the run's seeds. :meth:`optimum` finds the same theta* by Newton's method
    (:func:`mianalysis.tasks.convex.minimize_convex`, the route of the tasks that have no
    closed form), for ``ParameterSampler(reference="optimum")``.
    """

    name = "gaussian-sgd"
    presets = {
        "paper": {},
        "small": {},
        "high": {"d": 200},
    }
    streams = ("data", "noise")
    data_stream = "data"
    mask_stream = "noise"
    optimizer = "sgd"

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {
            "n_clients": 3,
            "d": 20,
            "n_iterations": 40,
            "eta": 0.1,
            "sigma": 1.0,
            "rho": 0.0,
            "tau": 1.0,
            "m0": 0.0,
            "s0": 1.0,
            "eigenvalues": [0.5, 2.0],
            "curvature": "rotated",
            "transform": "none",
            "data_seed": 0,
            "heterogeneity": 1.0,
        }

    setting_rules = {
        "n_clients": IntSetting(1),
        "d": IntSetting(1),
        "n_iterations": IntSetting(1),
        "eta": RealSetting(0, low_open=True),
        "sigma": RealSetting(0),
        "rho": RealSetting(0, 1),
        "tau": RealSetting(0),
        "m0": RealSetting(),
        "s0": RealSetting(0),
        "eigenvalues": RangeSetting(),
        "curvature": ChoiceSetting("rotated", "diagonal"),
        "transform": ChoiceSetting(*TRANSFORMS),
        "data_seed": IntSetting(0, 2**32 - 1),
        "heterogeneity": RealSetting(0, 1),
    }

    def check_settings_together(self) -> None:
        low, high = self.settings["eigenvalues"]
        eta = self.settings["eta"]
        if low <= 0 or eta * high >= 1:
            raise ValueError(f"`eigenvalues` and `eta` (task {self.name}) must give every eta * lambda in (0, 1) "
                             f"(a stable, non-oscillating descent); got eigenvalues [{low}, {high}] and eta {eta}")

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        if self.settings["heterogeneity"] == 1:  # the task as it was before the setting: recorded so
            del self.settings["heterogeneity"]
        # client -> (A_k, m_k) after heterogeneity; ("drawn", client) -> as drawn
        self._curvatures: dict[int | tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._root_tensor: torch.Tensor | None = None  # each client's square root of A_k, made on first use

    # ---------------------------------------------------------------- sizes
    @property
    def d(self) -> int:
        return int(self.settings["d"])

    @property
    def n_examples(self) -> int:
        """One example (the client's target) per iteration."""
        return int(self.settings["n_iterations"])

    @property
    def batch_size(self) -> int:
        return 1

    @property
    def lr(self) -> float:
        return float(self.settings["eta"])

    # ---------------------------------------------------------------- the clients' problems
    @property
    def heterogeneity(self) -> float:
        """How far each client's problem is from the clients' average (1: as drawn; 0: all equal)."""
        return float(self.settings.get("heterogeneity", 1.0))

    def client_problem(self, client: int) -> tuple[np.ndarray, np.ndarray]:
        """(A_k, m_k) of client `client` as float64 arrays: curvature (d, d) and mean (d,),
        after `heterogeneity` (see the class docstring)."""
        client = int(client)
        h = self.heterogeneity
        if h == 1:
            return self._drawn_problem(client)
        if client not in self._curvatures:
            drawn = [self._drawn_problem(k) for k in range(self.n_clients)]
            mean_a = np.mean([a for a, _ in drawn], axis=0)
            mean_m = np.mean([m for _, m in drawn], axis=0)
            a, m = drawn[client]
            self._curvatures[client] = ((1 - h) * mean_a + h * a, (1 - h) * mean_m + h * m)
        return self._curvatures[client]

    def _drawn_problem(self, client):
        """(A_k, m_k) as drawn from `data_seed`, before `heterogeneity`."""
        key = ("drawn", client)
        if key not in self._curvatures:
            rng = np.random.default_rng([int(self.settings["data_seed"]), client])
            low, high = self.settings["eigenvalues"]
            lam = rng.uniform(low, high, size=self.d)
            mean = rng.standard_normal(self.d)
            if self.settings["curvature"] == "rotated":
                q, r = np.linalg.qr(rng.standard_normal((self.d, self.d)))
                q = q * np.sign(np.diag(r))
                a = (q * lam) @ q.T
                a = 0.5 * (a + a.T)
            else:
                a = np.diag(lam)
            self._curvatures[key] = (a, mean)
        return self._curvatures[key]

    def _roots(self):
        """Symmetric square roots S_k of every A_k, float32, shape (n_clients, d, d)."""
        import torch

        if self._root_tensor is None:
            roots = []
            for k in range(self.n_clients):
                lam, q = np.linalg.eigh(self.client_problem(k)[0])
                roots.append((q * np.sqrt(lam)) @ q.T)
            self._root_tensor = torch.from_numpy(np.stack(roots).astype(np.float32))
        return self._root_tensor

    # ---------------------------------------------------------------- Task interface
    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("theta", (self.d,))]

    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """theta_0 = m0 + s0 N(0, I)."""
        import torch

        return [float(self.settings["m0"]) + float(self.settings["s0"]) * torch.randn(self.d, generator=generator)]

    def fixed_params(self) -> list[torch.Tensor]:
        """theta_0 = m0."""
        import torch

        return [torch.full((self.d,), float(self.settings["m0"]))]

    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        """Each example is the client's index (input) and ``S_k mu_k`` (target), where
        ``S_k`` is the square root of ``A_k``; ``mu_k = m_k + tau z`` with z drawn from
        each replica's "data" generator."""
        import torch

        root = self._roots()[int(client)]
        target = _times(root, self._targets(client, generators))  # rows S mu
        r, n = len(generators), self.n_examples
        inputs = torch.full((r, n, 1), float(client))
        return ClientBatchData(inputs, target[:, None, :].expand(r, n, self.d).contiguous(), {})

    def _targets(self, client, generators):
        """The targets mu_k = m_k + tau z (R, d), float32, z drawn first from each replica's
        "data" generator: what :meth:`client_data` trains on."""
        import torch

        mean = self.client_problem(client)[1]
        z = torch.stack([torch.randn(self.d, generator=g) for g in generators])  # (R, d)
        return torch.from_numpy(mean.astype(np.float32)) + float(self.settings["tau"]) * z

    def draw_masks(self, generators: ReplicaGenerators, batch_size: int) -> torch.Tensor:
        """The gradient noise xi of one step, (R, d)."""
        import torch

        eps = torch.stack([torch.randn(self.d, generator=g) for g in generators])
        rho = float(self.settings["rho"])
        if rho == 0:
            return eps
        zeta = torch.stack([torch.randn(self.d, generator=g) for g in generators.run])
        return math.sqrt(rho) * zeta + math.sqrt(1 - rho) * eps

    def _root_of(self, inputs):
        return self._roots()[inputs[:, 0, 0].long()]  # (R, d, d): each replica's client

    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        """``S_k theta`` for every example: (R, batch, d)."""
        out = _times(self._root_of(inputs), params[0])
        return out[:, None, :].expand(-1, inputs.shape[1], -1)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``0.5 |S_k theta - S_k mu_k|^2 = 0.5 (theta - mu_k)^T A_k (theta - mu_k)``, mean over the batch."""
        return 0.5 * ((outputs - targets) ** 2).sum(-1).mean(-1)

    def gradients(self, params: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor,
                  masks: torch.Tensor | None = None) -> list[torch.Tensor]:
        """``A_k (theta - mu_k) + sigma xi`` in closed form (``S_k (S_k theta - S_k mu_k)``)."""
        root = self._root_of(inputs)
        resid = _times(root, params[0].detach()) - targets[:, 0]
        grad = _times(root, resid)
        sigma = float(self.settings["sigma"])
        return [grad if masks is None or sigma == 0 else grad + sigma * masks]

    def recorded(self, params: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """The parameters with `transform` applied to every coordinate."""
        import torch

        kind = self.settings["transform"]
        if kind == "sinh":
            return [torch.sinh(p) for p in params]
        if kind == "cubic":
            return [p + p**3 for p in params]
        return params

    # ---------------------------------------------------------------- exact answers
    def exact_covariance(self, iteration: int, a: int, b: int, *, init: str = "per-run",
                         shared: str | Sequence[str] = ()) -> np.ndarray:
        """Joint covariance (2d, 2d) of (theta_a, theta_b) after `iteration` steps, before
        `transform`, for the sampler's `init` and `shared` streams (float64)."""
        from .._internal.validation import check_choice, check_int

        init = check_choice(init, "init", INIT_MODES)
        shared = check_shared(shared, self)
        iteration = check_int(iteration, "iteration", low=0, high=self.n_examples)
        a = check_int(a, "a", low=0, high=self.n_clients - 1)
        b = check_int(b, "b", low=0, high=self.n_clients - 1)
        cab = self._cross_block(iteration, a, b, init, shared)
        return np.block([[self._cross_block(iteration, a, a, init, shared), cab],
                         [cab.T, self._cross_block(iteration, b, b, init, shared)]])

    def _propagator(self, client):
        return np.eye(self.d) - float(self.settings["eta"]) * self.client_problem(client)[0]

    def _cross_block(self, iteration, a, b, init, shared):
        """Cov(theta_a, theta_b) (d, d) after `iteration` steps (checked arguments)."""
        s = self.settings
        eta, sigma = float(s["eta"]), float(s["sigma"])
        start = float(s["s0"]) ** 2 if init == "per-run" else 0.0
        rho = 1.0 if "noise" in shared else float(s["rho"])
        same = a == b
        return cross_covariances(self._propagator(a), self._propagator(b), iteration, start=start,
                                 target=float(s["tau"]) ** 2 * (1.0 if same or "data" in shared else 0.0),
                                 noise=(eta * sigma) ** 2 * (1.0 if same else rho))[iteration]

    # ---------------------------------------------------------------- the federation's reference
    def check_central(self) -> None:
        """Always a ValueError: gaussian-sgd knows its exact reference, the minimiser
        :meth:`central_parameters` that ``mianalysis.analysis.studies.headroom(dump, reference="task")`` (the
        default for a dump without a client "central") recomputes from the dump's seed; a
        trained central client would only approximate it."""
        raise ValueError("task 'gaussian-sgd' knows its exact reference (the minimiser of the summed losses of each "
                         "run's targets, which mianalysis.analysis.studies.headroom uses with reference='task', the default): sample "
                         "it without `reference`='central' (--reference central)")

    def curvature_weights(self) -> np.ndarray:
        """``W_k = (sum_j A_j)^-1 A_k`` for every client, shape (n_clients, d, d): the weights
        that combine the clients' targets into :meth:`central_parameters` (they sum to I)."""
        total = sum(self.client_problem(k)[0] for k in range(self.n_clients))
        return np.stack([np.linalg.solve(total, self.client_problem(k)[0]) for k in range(self.n_clients)])

    def central_parameters(self, data_generators: Sequence[ReplicaGenerators]) -> np.ndarray:
        """The minimiser ``theta* = (sum_k A_k)^-1 sum_k A_k mu_k`` of the summed losses of
        each run's targets, shape (n_runs, d), float64.

        `data_generators` holds, for every client, the fresh generators of its data stream in
        the runs wanted, as :meth:`mianalysis.ParameterSampler.data_generators` gives them:
        the targets are recomputed exactly as training drew them (the float32 ``mu_k`` of
        :meth:`client_data`), so this is the reference of those runs of a dump. It does not
        depend on ``init``.
        """
        if len(data_generators) != self.n_clients:
            raise ValueError(f"`data_generators` must hold one list per client ({self.n_clients}); "
                             f"got {len(data_generators)}")
        weights = self.curvature_weights()
        out = 0.0
        for k, generators in enumerate(data_generators):
            out = out + self._targets(k, generators).numpy().astype(np.float64) @ weights[k].T
        return np.asarray(out)

    def optimum(self, data_generators: Sequence[ReplicaGenerators]) -> tuple[np.ndarray, np.ndarray]:
        """Each run's theta* by :func:`mianalysis.tasks.convex.minimize_convex`, shape
        (n_runs, d), float64, and the gradient norm there (n_runs,), <= 1e-8.

        The pooled objective is ``(1 / K) sum_k 0.5 (theta - mu_k)^T A_k (theta - mu_k)``
        (every client holds `n_iterations` examples, so the size weights are equal), with the
        run's float32 targets ``mu_k`` as :meth:`client_data` draws them; Newton's method from
        zero. Its minimiser is :meth:`central_parameters`, the closed form, which this equals
        to rounding (the same `data_generators` convention; before `transform`).
        """
        from .convex import minimize_convex

        if len(data_generators) != self.n_clients:
            raise ValueError(f"`data_generators` must hold one list per client ({self.n_clients}); "
                             f"got {len(data_generators)}")
        k = self.n_clients
        curvatures = [self.client_problem(c)[0] for c in range(k)]
        hessian = sum(curvatures) / k
        targets = np.stack([self._targets(c, g).numpy().astype(np.float64) for c, g in enumerate(data_generators)])
        thetas, norms = [], []
        for run in range(targets.shape[1]):
            mus = targets[:, run]  # (K, d)

            def value_grad_hess(theta, mus=mus):
                resid = theta[None, :] - mus  # (K, d)
                pulled = np.stack([a @ e for a, e in zip(curvatures, resid)])  # A_k (theta - mu_k)
                return 0.5 * float(np.sum(resid * pulled)) / k, pulled.sum(0) / k, hessian

            found = minimize_convex(value_grad_hess, np.zeros(self.d))
            thetas.append(found.theta)
            norms.append(found.grad_norm)
        return np.stack(thetas), np.asarray(norms)

    def exact_error_moments(self, iteration: int, *, init: str = "per-run",
                            shared: str | Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Mean (n_clients, d) and covariance (n_clients d, n_clients d) of the clients' errors
        ``e_k = theta_k - theta*`` after `iteration` steps (before `transform`), float64.

        Every checkpoint and the run's reference :meth:`central_parameters` are jointly
        Gaussian: ``E theta_k = P_k^t m0 + (I - P_k^t) m_k`` with ``P_k = I - eta A_k``,
        ``E theta* = sum_k W_k m_k``; the covariances of the thetas are those of
        :meth:`exact_covariance`, ``Cov(theta_a, theta*) = tau^2 (I - P_a^t) sum_j c_aj W_j'``
        and ``Cov(theta*, theta*) = tau^2 sum_ij c_ij W_i W_j'``, where ``c_ij`` is 1 when
        clients i and j draw the same z (i = j, or the "data" stream shared) and 0 otherwise.
        """
        from .._internal.validation import check_choice, check_int

        init = check_choice(init, "init", INIT_MODES)
        shared = check_shared(shared, self)
        iteration = check_int(iteration, "iteration", low=0, high=self.n_examples)
        n, d = self.n_clients, self.d
        tau2 = float(self.settings["tau"]) ** 2
        weights = self.curvature_weights()
        coupled = np.ones((n, n)) if "data" in shared else np.eye(n)
        moved = [np.eye(d) - np.linalg.matrix_power(self._propagator(k), iteration) for k in range(n)]
        m0 = np.full(d, float(self.settings["m0"]))
        means = np.stack([m0 + moved[k] @ (self.client_problem(k)[1] - m0) for k in range(n)])
        central_mean = sum(weights[k] @ self.client_problem(k)[1] for k in range(n))
        with_central = [tau2 * moved[a] @ sum(coupled[a, j] * weights[j].T for j in range(n)) for a in range(n)]
        central = tau2 * sum(coupled[i, j] * weights[i] @ weights[j].T for i in range(n) for j in range(n))
        cov = np.zeros((n * d, n * d))
        for a in range(n):
            for b in range(a, n):
                block = (self._cross_block(iteration, a, b, init, shared) - with_central[a] - with_central[b].T
                         + central)
                cov[a * d:(a + 1) * d, b * d:(b + 1) * d] = block
                cov[b * d:(b + 1) * d, a * d:(a + 1) * d] = block.T
        return means - central_mean, 0.5 * (cov + cov.T)

    def exact_mi(self, iteration: int, a: int, b: int, *, init: str = "per-run",
                 shared: str | Sequence[str] = ()) -> float:
        """Exact MI in bits between clients `a` and `b` after `iteration` steps.

        The same with any `transform` (a strictly monotone map of each coordinate). Exactly
        0 with ``init="fixed"`` and nothing shared (rho = 0); infinite at iteration 0 with
        ``init="per-run"`` (both clients hold the run's start).

        Examples
        --------
        >>> from mianalysis.tasks import get_task
        >>> task = get_task("gaussian-sgd", d=5, n_iterations=40, tau=1.0)
        >>> task.exact_mi(40, 0, 1, init="fixed")
        0.0
        >>> round(task.exact_mi(1, 0, 1, init="fixed", shared=["data"]), 3), round(task.exact_mi(40, 0, 1,
        ...       init="fixed", shared=["data"]), 3)
        (1.437, 8.299)

        A target shared within the run (``mu_k = m_k + tau z``, the same z) makes the clients
        dependent, more so as each moves towards its target.
        """
        cov = self.exact_covariance(iteration, a, b, init=init, shared=shared)
        d = self.d
        return gaussian_mi_from_blocks(cov[:d, :d], cov[d:, d:], cov[:d, d:])
