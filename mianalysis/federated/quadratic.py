"""A federation over the gaussian-sgd task's clients: where does each aggregation rule converge?

Client k of :class:`mianalysis.tasks.GaussianSGDTask` has the loss
``L_k(theta) = 0.5 (theta - mu_k)^T A_k (theta - mu_k)`` and sees noisy gradients
``A_k (theta - mu_k) + sigma xi``. The federation's optimum in a run is the minimiser of the
summed losses, ``theta* = (sum_k A_k)^-1 sum_k A_k mu_k``, known exactly, so every rule of
:mod:`mianalysis.federated.registry` can be scored by its squared error to theta* per round,
not only by a loss.

A round: every client starts from the global model, takes `local_steps` plain SGD steps of
`lr` on its own noisy gradients and sends its model update with the side information its
rule needs (:data:`~mianalysis.federated.registry.SIDE_INFORMATION`); the server adds the
rule's combination of the updates to the global model (the simulator's ``placement="update"``).
The side information is computed by each client from its own gradients only:

- "precisions" (the "fisher" rule), by `precision`:
  "hutchinson" (default): the diagonal curvature at the final local model from
  `n_probes` Rademacher probes v, ``v * (g(theta + v) - g(theta - v)) / 2``, whose mean
  over probes estimates ``diag(A_k)`` (Hutchinson 1990; a negative estimate counts as 0).
  The two gradients of a probe have independent noise draws, as if computed on two
  minibatches: this task's gradient noise is additive (no per-example curvature), so with
  one draw for both the noise would cancel exactly and the estimate of a diagonal A_k would
  be diag(A_k) itself, where a real minibatch's curvature differs from the population's.
  With two draws each probe adds an error ``sigma v (xi - xi') / 2``, of variance
  ``sigma^2 / 2`` per coordinate, to the off-diagonal error ``v (A_k - diag(A_k)) v``
  (0 for a diagonal A_k); exact only with exact gradients (sigma = 0) and diagonal A_k;
  "empirical": the diagonal empirical Fisher, the mean over `n_probes` fresh noisy gradients
  at the final local model of their squares (what Fisher merging computes on a network);
  with this task's isotropic noise it is ``(A_k (theta - mu_k))^2 + sigma^2`` on average,
  blind to curvature at a client's optimum;
  "exact": ``diag(A_k)`` from the task (an oracle of curvature, not of theta*).
- "variances" (the "inverse_variance" rule): the per-coordinate variance of the client's
  iterates in the round (the model at its start and after each local step, divided by their
  number), as the simulator's clients compute it over their last local epoch; with
  `burn_in` b the first b of the round's E + 1 iterates are left out, so the models after
  local steps b, ..., E count (b = 0: the start too; FedPA's burn-in: at stationarity
  an SGD iterate's variance along a curvature lambda is about ``lr sigma^2 / (2 lambda)``, so
  its inverse weights by curvature, while early iterates move along the client's path).

Two settings change what FedAvg does, as Flower's strategies define them
(``flwr.serverapp.strategy``):

- `proximal_mu` (FedProx, Li et al. 2020): each local step follows the gradient of the
  client's loss plus ``mu / 2 |theta - theta_global|^2``, i.e. ``g + mu (theta - theta_global)``
  (no extra gradient of the loss); mu = 0 is FedAvg's client.
- `server_optimizer` with `server_params` (:data:`SERVER_OPTIMIZERS`, :func:`server_step`):
  the server treats the round's combined update Delta_t (Flower's aggregated model minus the
  global one, the negative of its pseudo-gradient) as a step of "sgd" (server learning rate
  eta; eta = 1: the plain rule), "momentum" (FedAvgM, Hsu et al. 2019), "adam" (FedAdam) or
  "yogi" (FedYogi, Reddi et al. 2021). It composes with every rule: the combination of the
  updates is the rule's.

Replicates (seeds) are paired across rules: replicate r draws the same start, the same
targets and the same noise under every rule, each stream from its own generator seeded by
(seed, replicate, stream, round, client), so the draws do not depend on what a rule does
with them. With `init` "per-run" the start is ``m0 + s0 N(0, I)`` per replicate, with
"fixed" it is ``m0``; `shared` names the task's streams ("data", "noise") that every client
of a replicate draws alike (the same target offset z; identical gradient noise), as in
:class:`mianalysis.ParameterSampler`; otherwise the noise has the task's correlation `rho`.
A replicate's numbers do not depend on the other replicates run beside it (the products are
row by row, in float64).

Known answers (tested): with exact gradients (sigma = 0) FedAvg converges to
:func:`fixed_point`, ``(sum_k M_k)^-1 sum_k M_k mu_k`` with ``M_k = I - (I - lr A_k)^E``:
theta* for one local step, the plain mean of the clients' optima as E grows (client drift).
With FedProx's term the local steps go ``N_k = M'_k B_k^-1 A_k`` of the way, with
``B_k = A_k + mu I`` and ``M'_k = I - (I - lr B_k)^E``, so the fixed point is
``(sum_k N_k)^-1 sum_k N_k mu_k`` (less drift: N_k -> 0 as mu grows, but N_k's shape changes).
Fisher weighting with fixed diagonal precisions D_k converges to
``(sum_k D_k M_k)^-1 sum_k D_k M_k mu_k``: theta* once the clients converge locally
(M_k = I) and the curvatures are diagonal (D_k = A_k). With ``heterogeneity=0`` the
clients share their curvature and mean (A_k = A, m_k = m), but their targets
``mu_k = m + tau z_k`` still differ; Fisher weighting with the exact diag(A) then gives
every client the same weights and is FedAvg, while estimated weights (Hutchinson, the
empirical Fisher, iterate variances) differ between clients by their noise and are not.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._internal.io import progress_bar
from .._internal.seeding import replica_seed
from .._internal.validation import check_choice, check_int, check_real
from ..tasks import GaussianSGDTask
from ..tasks.base import INIT_MODES, check_shared
from .registry import get_rule

__all__ = ["PRECISIONS", "SERVER_OPTIMIZERS", "QuadraticConfig", "QuadraticResult", "QuadraticFederation",
           "fixed_point", "server_step"]

#: How a client of the "fisher" rule estimates its precisions (see the module docstring).
PRECISIONS = ("hutchinson", "empirical", "exact")

#: The server optimizers of :func:`server_step` with their settings' defaults: Flower's
#: (``FedAvgM``: server learning rate 1, momentum 0; ``FedAdam``: eta 0.1, ``FedYogi``: eta
#: 0.01, both beta_1 0.9, beta_2 0.99, tau 1e-3). "sgd" with eta 1 is the plain rule.
SERVER_OPTIMIZERS: dict[str, dict[str, float]] = {
    "sgd": {"eta": 1.0},
    "momentum": {"eta": 1.0, "momentum": 0.0},
    "adam": {"eta": 0.1, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3},
    "yogi": {"eta": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3},
}

# The streams' words in the seeds (seed, replicate, stream, round, client): CRC-32s of their
# names: non-zero (NumPy's SeedSequence pads short keys with zeros, so replica_seed(3) ==
# replica_seed(3, 0): a zero word cannot tell keys apart) and apart from the small stream
# numbers of the sampler and the simulator.
_START, _DATA, _NOISE, _SHARED_NOISE, _PROBES, _PROBE_NOISE = (
    zlib.crc32(f"quadratic-federation/{name}".encode())
    for name in ("start", "data", "noise", "shared-noise", "probes", "probe-noise"))


def _times(matrices: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """``matrices @ vectors`` row by row, (d, d) or (..., d, d) times (..., d) -> (..., d), as a
    product and a sum over the last axis, so that a row's result does not depend on how many
    rows are computed with it."""
    return np.asarray((matrices * vectors[..., None, :]).sum(-1))


@dataclass(frozen=True)
class QuadraticConfig:
    """Settings of a federated run on the gaussian-sgd clients.

    Attributes
    ----------
    rounds : int, default=30
        R: communication rounds (all clients every round).
    local_steps : int, default=10
        E: local SGD steps per client and round, one noisy gradient each.
    lr : float, default=0.1
        The clients' learning rate.
    aggregator : str, default="fedavg"
        A rule of :func:`mianalysis.federated.registry.rule_names` applied to the clients'
        model updates, with `aggregator_params`.
    aggregator_params : dict
        The rule's settings (``{"threshold": 0.2, "rescale": False}`` for "and_mask").
    precision : {"hutchinson", "empirical", "exact"}, default="hutchinson"
        How the clients of a rule with "precisions" estimate them (module docstring).
    n_probes : int, default=1
        Probes (Hutchinson) or gradient draws (empirical Fisher) per client and round.
    burn_in : int, default=0
        For a rule with "variances": b, how many of the round's ``local_steps + 1`` iterates
        (its start, then the model after each local step) are left out of the variance, which
        is over the models after local steps b, ..., E (at most ``local_steps - 1``; 0: the
        round's start and every step; 1: every step).
    init : {"per-run", "fixed"}, default="per-run"
        The start: drawn per replicate, or the task's ``m0``.
    shared : tuple of str, default=()
        The task's streams ("data", "noise") drawn alike by every client of a replicate.
    proximal_mu : float, default=0.0
        FedProx's mu: each local step adds ``mu (theta - theta_global)`` to the gradient
        (0: none).
    server_optimizer : {"sgd", "momentum", "adam", "yogi"}, default="sgd"
        How the server applies the round's combined update (:func:`server_step`): "sgd"
        with its default eta 1 adds it (the plain rule); "momentum" is FedAvgM, "adam"
        FedAdam, "yogi" FedYogi.
    server_params : dict
        The server optimizer's settings (:data:`SERVER_OPTIMIZERS` has them and Flower's
        defaults), e.g. ``{"eta": 1.0, "momentum": 0.9}`` for "momentum".
    """

    rounds: int = 30
    local_steps: int = 10
    lr: float = 0.1
    aggregator: str = "fedavg"
    aggregator_params: Mapping[str, Any] = field(default_factory=dict)
    precision: str = "hutchinson"
    n_probes: int = 1
    burn_in: int = 0
    init: str = "per-run"
    shared: Sequence[str] = ()
    proximal_mu: float = 0.0
    server_optimizer: str = "sgd"
    server_params: Mapping[str, float] = field(default_factory=dict)


@dataclass
class QuadraticResult:
    """What :meth:`QuadraticFederation.run` returns.

    Attributes
    ----------
    replicates : ndarray of shape (R,)
        The replicate ids, in the order of the rows below.
    error : ndarray of shape (R, rounds + 1)
        ``|theta_t - theta*|^2`` of the global model after round t (t = 0: the start).
    excess_loss : ndarray of shape (R, rounds + 1)
        The clients' mean loss at the global model minus its minimum:
        ``0.5 (theta_t - theta*)^T (sum_k A_k) (theta_t - theta*) / K``.
    loss : ndarray of shape (R, rounds + 1)
        The clients' mean loss ``mean_k L_k(theta_t)`` (noise-free), what a federation
        can measure on its clients (the learning-rate search scores it).
    global_models : ndarray of shape (rounds + 1, R, d)
    theta_star : ndarray of shape (R, d)
        Each replicate's optimum ``(sum_k A_k)^-1 sum_k A_k mu_k``.
    targets : ndarray of shape (R, K, d)
        Each replicate's client optima mu_k.
    """

    replicates: np.ndarray
    error: np.ndarray
    excess_loss: np.ndarray
    loss: np.ndarray
    global_models: np.ndarray
    theta_star: np.ndarray
    targets: np.ndarray


def _server_iv(optimizer: Any, params: Any) -> tuple[str, dict[str, float]]:
    """(optimizer, its settings with the defaults filled in), checked."""
    check_choice(optimizer, "server_optimizer", tuple(SERVER_OPTIMIZERS))
    if not isinstance(params, Mapping):
        raise TypeError(f"`server_params` must be a mapping of settings; got {type(params).__name__}")
    defaults = SERVER_OPTIMIZERS[optimizer]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"`server_params` of server_optimizer {optimizer!r} takes {', '.join(defaults)}; "
                         f"got {unknown}")
    merged = {**defaults, **params}
    checked = {}
    for key, value in merged.items():
        if key in ("eta", "tau"):
            checked[key] = check_real(value, f"server_params[{key!r}]", low=0, low_open=True)
        else:  # momentum, beta_1, beta_2
            checked[key] = check_real(value, f"server_params[{key!r}]", low=0, high=1, high_open=True)
    return optimizer, checked


def server_step(optimizer: str, params: Mapping[str, float], update: np.ndarray,
                state: Mapping[str, np.ndarray], round_index: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The server's change to the global model from a round's combined update, as Flower's
    strategies compute it (``flwr.serverapp.strategy``: FedAvgM, FedAdam, FedYogi).

    With Delta_t the combined update of round t (the aggregated model minus the global one;
    Flower's pseudo-gradient is -Delta_t) and m_0 = v_0 = 0:

    - "sgd": ``eta Delta_t``.
    - "momentum" (FedAvgM): ``m_t = momentum m_{t-1} + Delta_t``, step ``eta m_t``.
    - "adam" (FedAdam): ``m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t``,
      ``v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2``, step
      ``eta_t m_t / (sqrt(v_t) + tau)`` with Flower's bias correction
      ``eta_t = eta sqrt(1 - beta_2^(t + 1)) / (1 - beta_1^(t + 1))`` (its exponent is the
      round number plus one; Kingma & Ba's is t).
    - "yogi" (FedYogi): m_t as FedAdam's,
      ``v_t = v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2)``, step
      ``eta m_t / (sqrt(v_t) + tau)`` (no bias correction).

    Parameters
    ----------
    optimizer : {"sgd", "momentum", "adam", "yogi"}
    params : mapping
        The optimizer's settings (:data:`SERVER_OPTIMIZERS`; missing ones take their defaults).
    update : ndarray
        Delta_t, of any shape (a row per replicate).
    state : mapping
        The previous round's ``{"m": m_{t-1}, "v": v_{t-1}}`` (those the optimizer keeps);
        empty in round 1.
    round_index : int
        t, from 1.

    Returns
    -------
    step : ndarray
        What the server adds to the global model.
    state : dict
        ``{"m": m_t, "v": v_t}`` (those the optimizer keeps), for the next round.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.federated.quadratic import server_step
    >>> step, state = server_step("adam", {"eta": 1.0}, np.array([2.0, -0.5]), {}, 1)
    >>> np.round(step, 4)  # the first step of Adam is about eta_1 sign(Delta_1)
    array([ 0.7388, -0.7279])
    """
    optimizer, p = _server_iv(optimizer, params)
    t = check_int(round_index, "round_index", low=1)
    update = np.asarray(update, dtype=np.float64)
    if optimizer == "sgd":
        return (update if p["eta"] == 1 else p["eta"] * update), {}
    if optimizer == "momentum":
        m = update if "m" not in state else p["momentum"] * state["m"] + update
        return p["eta"] * m, {"m": m}
    b1, b2 = p["beta_1"], p["beta_2"]
    m = b1 * (state["m"] if "m" in state else 0.0) + (1 - b1) * update
    v_old = state["v"] if "v" in state else np.zeros_like(update)
    square = update ** 2
    if optimizer == "adam":
        v = b2 * v_old + (1 - b2) * square
        eta = p["eta"] * np.sqrt(1 - b2 ** (t + 1.0)) / (1 - b1 ** (t + 1.0))
    else:  # yogi
        v = v_old - (1 - b2) * square * np.sign(v_old - square)
        eta = p["eta"]
    return eta * m / (np.sqrt(v) + p["tau"]), {"m": m, "v": v}


def fixed_point(task: GaussianSGDTask, targets: np.ndarray, *, lr: float, local_steps: int,
                precisions: np.ndarray | None = None, proximal_mu: float = 0.0) -> np.ndarray:
    """Where a federation with exact gradients converges: FedAvg, or a rule with fixed precisions.

    With ``M_k = I - (I - lr A_k)^E`` (the part of the way to mu_k that E local steps go),
    FedAvg's rounds ``theta <- mean_k (theta + M_k (mu_k - theta))`` have the fixed point
    ``(sum_k M_k)^-1 sum_k M_k mu_k``; per-coordinate precision weighting with fixed
    diagonal precisions D_k (``precisions``) has ``(sum_k D_k M_k)^-1 sum_k D_k M_k mu_k``.
    With FedProx's term (`proximal_mu` mu > 0) M_k is ``(I - (I - lr B_k)^E) B_k^-1 A_k``,
    ``B_k = A_k + mu I``. A server optimizer (momentum, Adam, Yogi) does not move the point
    where the combined update vanishes, but it need not converge to it.

    Parameters
    ----------
    task : GaussianSGDTask
    targets : array of shape (..., K, d)
        The clients' optima mu_k (:attr:`QuadraticResult.targets`).
    lr : float
    local_steps : int
    precisions : array of shape (K, d), optional
        D_k's diagonals; None: FedAvg (equal weights).
    proximal_mu : float, default=0.0
        FedProx's mu (0: none).

    Returns
    -------
    ndarray of shape (..., d)
    """
    task = _check_task(task)
    lr = check_real(lr, "lr", low=0, low_open=True)
    local_steps = check_int(local_steps, "local_steps", low=1)
    proximal_mu = check_real(proximal_mu, "proximal_mu", low=0)
    targets = np.asarray(targets, dtype=np.float64)
    k, d = task.n_clients, task.d
    if targets.shape[-2:] != (k, d):
        raise ValueError(f"`targets` must have shape (..., {k}, {d}) (clients, coordinates); got {targets.shape}")
    if precisions is None:
        weights = np.ones((k, d))
    else:
        weights = np.asarray(precisions, dtype=np.float64)
        if weights.shape != (k, d) or not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise ValueError(f"`precisions` must be finite, >= 0 and of shape ({k}, {d}); got shape {weights.shape}")
    moved = []
    for c in range(k):
        a = task.client_problem(c)[0]
        if proximal_mu == 0:
            moved.append(np.eye(d) - np.linalg.matrix_power(np.eye(d) - lr * a, local_steps))
        else:
            b = a + proximal_mu * np.eye(d)
            moved.append((np.eye(d) - np.linalg.matrix_power(np.eye(d) - lr * b, local_steps))
                         @ np.linalg.solve(b, a))
    total = sum(weights[c][:, None] * moved[c] for c in range(k))
    right = sum(_times(weights[c][:, None] * moved[c], targets[..., c, :]) for c in range(k))
    return np.asarray(np.linalg.solve(total, np.asarray(right)[..., None])[..., 0])


def _check_task(task: Any) -> GaussianSGDTask:
    if not isinstance(task, GaussianSGDTask):
        raise TypeError(f"`task` must be a GaussianSGDTask (get_task('gaussian-sgd', ...)); got {task!r}")
    return task


class QuadraticFederation:
    """Federated rounds of local SGD on the clients of a gaussian-sgd `task`, `replicates`
    seeds at once (see the module docstring for what a round does and what is paired).

    Parameters
    ----------
    task : GaussianSGDTask
        The clients: their curvatures, means, noise (`sigma`, `rho`), target spread `tau`
        and start (`m0`, `s0`); its `eta` and `n_iterations` are not used (the config's
        `lr`, `rounds` and `local_steps` are).
    config : QuadraticConfig
    replicates : int, default=1
    seed : int, default=0

    Examples
    --------
    >>> from mianalysis.tasks import get_task
    >>> from mianalysis.federated.quadratic import QuadraticConfig, QuadraticFederation
    >>> task = get_task("gaussian-sgd", d=4, sigma=0.0, curvature="diagonal")
    >>> one_step = QuadraticFederation(task, QuadraticConfig(rounds=300, local_steps=1, lr=0.4)).run()
    >>> bool(one_step.error[0, -1] < 1e-12)  # one local step of exact gradients: FedAvg reaches theta*
    True
    >>> drift = QuadraticFederation(task, QuadraticConfig(rounds=300, local_steps=20, lr=0.4)).run()
    >>> bool(drift.error[0, -1] > 1e-3)  # twenty: it stops at a point between the clients' optima
    True
    """

    def __init__(self, task: GaussianSGDTask, config: QuadraticConfig, *, replicates: int = 1, seed: int = 0) -> None:
        self.task = _check_task(task)
        if not isinstance(config, QuadraticConfig):
            hint = " (pass QuadraticConfig(**settings))" if isinstance(config, Mapping) else ""
            raise TypeError(f"`config` must be a QuadraticConfig{hint}; got {type(config).__name__}")
        self.config = config
        check_int(config.rounds, "rounds", low=1)
        check_int(config.local_steps, "local_steps", low=1)
        check_real(config.lr, "lr", low=0, low_open=True)
        check_choice(config.precision, "precision", PRECISIONS)
        check_int(config.n_probes, "n_probes", low=1)
        check_int(config.burn_in, "burn_in", low=0, high=config.local_steps - 1)
        check_choice(config.init, "init", INIT_MODES)
        self.proximal_mu = check_real(config.proximal_mu, "proximal_mu", low=0)
        self.server_optimizer, self.server_params = _server_iv(config.server_optimizer, config.server_params)
        self.shared = check_shared(config.shared, task)
        self.rule = get_rule(config.aggregator)
        if self.rule.side_information not in (None, "precisions", "variances"):
            raise ValueError(f"`aggregator`={config.aggregator!r} needs each client's "
                             f"{' and '.join(self.rule.side_arguments)}; this federation's clients compute only "
                             "precisions and variances")
        self.aggregate = self.rule.bind(config.aggregator_params)
        self.replicates = check_int(replicates, "replicates", low=1)
        self.seed = check_int(seed, "seed", low=0)
        k = task.n_clients
        self.curvatures = np.stack([task.client_problem(c)[0] for c in range(k)])  # (K, d, d)
        self.means = np.stack([task.client_problem(c)[1] for c in range(k)])  # (K, d)
        s = task.settings
        self.sigma, self.tau = float(s["sigma"]), float(s["tau"])
        self.rho = 1.0 if "noise" in self.shared else float(s["rho"])

    # ------------------------------------------------------------------ streams
    def _normal(self, replicate: int, stream: int, round_index: int, client: int, shape: tuple[int, ...]
                ) -> np.ndarray:
        rng = np.random.default_rng(replica_seed(self.seed, replicate, stream, round_index, client))
        return rng.standard_normal(shape)

    def targets(self, replicate_ids: Sequence[int]) -> np.ndarray:
        """The clients' optima ``mu_k = m_k + tau z_k`` of every replicate, (R, K, d); z_k is
        the replicate's own per client, or one z for all clients with "data" shared."""
        k, d = self.task.n_clients, self.task.d
        z = np.stack([np.stack([self._normal(r, _DATA, 0, 0 if "data" in self.shared else c, (d,))
                                for c in range(k)]) for r in replicate_ids])
        return self.means[None] + self.tau * z

    def start(self, replicate_ids: Sequence[int]) -> np.ndarray:
        """The global model before round 1, (R, d)."""
        s, d = self.task.settings, self.task.d
        m0 = float(s["m0"])
        if self.config.init == "fixed":
            return np.full((len(replicate_ids), d), m0)
        return m0 + float(s["s0"]) * np.stack([self._normal(r, _START, 0, 0, (d,)) for r in replicate_ids])

    def noise(self, replicate_ids: Sequence[int], round_index: int, client: int) -> np.ndarray:
        """The gradient noise xi of `client`'s local steps in a round, (E, R, d):
        ``sqrt(rho) zeta + sqrt(1 - rho) eps_k``, zeta common to the clients of a replicate."""
        shape = (self.config.local_steps, self.task.d)
        own = np.stack([self._normal(r, _NOISE, round_index, client, shape) for r in replicate_ids], axis=1)
        if self.rho == 0:
            return own
        common = np.stack([self._normal(r, _SHARED_NOISE, round_index, 0, shape) for r in replicate_ids], axis=1)
        return np.sqrt(self.rho) * common + np.sqrt(1 - self.rho) * own

    # ------------------------------------------------------------------ one client
    def gradient(self, client: int, theta: np.ndarray, targets: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """``A_k (theta - mu_k) + sigma xi`` for every replicate (rows of `theta`, `targets`, `noise`)."""
        return _times(self.curvatures[client], theta - targets) + self.sigma * noise

    def precisions(self, client: int, theta: np.ndarray, targets: np.ndarray, replicate_ids: Sequence[int],
                   round_index: int) -> np.ndarray:
        """The client's "precisions" at its final local model `theta` (R, d), by the config's
        `precision` (module docstring)."""
        kind, n, d = self.config.precision, self.config.n_probes, self.task.d
        if kind == "exact":
            return np.broadcast_to(np.diag(self.curvatures[client]), theta.shape).copy()
        draws = np.stack([self._normal(r, _PROBES, round_index, client, (n, d)) for r in replicate_ids], axis=1)
        if kind == "hutchinson":  # two independent noise draws per probe (module docstring), drawn once
            noise = np.stack([self._normal(r, _PROBE_NOISE, round_index, client, (n, 2, d)) for r in replicate_ids],
                             axis=1)  # (n, R, 2, d)
        total = np.zeros_like(theta)
        for i in range(n):
            if kind == "empirical":  # the squares of fresh noisy gradients
                total += self.gradient(client, theta, targets, draws[i]) ** 2
            else:  # hutchinson: gradients at theta + v and theta - v, each with its own noise draw
                probe = np.where(draws[i] >= 0, 1.0, -1.0)
                difference = (self.gradient(client, theta + probe, targets, noise[i, :, 0])
                              - self.gradient(client, theta - probe, targets, noise[i, :, 1]))
                total += probe * difference / 2
        return np.maximum(total / n, 0.0)

    def train_client(self, client: int, theta: np.ndarray, targets: np.ndarray, replicate_ids: Sequence[int],
                     round_index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The client's model update from the global model `theta` (R, d) after its local
        steps, and its side information (R, d) for the config's rule (None if it needs none)."""
        lr, side = self.config.lr, self.rule.side_information
        noise = self.noise(replicate_ids, round_index, client)
        local = theta.copy()
        burn_in = self.config.burn_in
        iterates = None if side != "variances" else [local] if burn_in == 0 else []
        mu = self.proximal_mu
        for step in range(self.config.local_steps):
            gradient = self.gradient(client, local, targets, noise[step])
            if mu:  # FedProx: the gradient of mu / 2 |local - theta|^2 too
                gradient = gradient + mu * (local - theta)
            local = local - lr * gradient
            if iterates is not None and step + 1 >= burn_in:
                iterates.append(local)
        info = None
        if side == "precisions":
            info = self.precisions(client, local, targets, replicate_ids, round_index)
        elif iterates is not None:
            info = np.stack(iterates).var(axis=0)
        return local - theta, info

    # ------------------------------------------------------------------ the run
    def run(self, *, replicate_ids: Sequence[int] | None = None, progress: bool = False) -> QuadraticResult:
        """Train all rounds for every replicate (default ``range(replicates)``).

        Parameters
        ----------
        replicate_ids : sequence of int, optional
            The replicates (seeds) to train; all by default.
        progress : bool, default=False
            A progress bar over rounds on stderr.

        Raises
        ------
        ValueError
            If training diverged (a model update not finite): lower `lr`; or if
            `replicate_ids` is empty.
        """
        cfg, k = self.config, self.task.n_clients
        ids = list(range(self.replicates)) if replicate_ids is None else [check_int(r, "replicate_ids", low=0)
                                                                           for r in replicate_ids]
        if not ids:
            raise ValueError("`replicate_ids` must name at least one replicate; got none")
        targets = self.targets(ids)  # (R, K, d)
        total = self.curvatures.sum(0)
        weighted = np.sum([_times(self.curvatures[c], targets[:, c]) for c in range(k)], axis=0)  # (R, d)
        theta_star = np.linalg.solve(total, weighted[..., None])[..., 0]
        theta = self.start(ids)
        models = [theta]
        server_state: dict[str, np.ndarray] = {}
        bar = progress_bar(cfg.rounds, unit="round", desc=f"quadratic/{cfg.aggregator}", enabled=progress)
        with np.errstate(over="ignore", invalid="ignore"):  # a diverging rate is reported below
            for t in range(1, cfg.rounds + 1):
                step, server_state = server_step(self.server_optimizer, self.server_params,
                                                 self._round(theta, targets, ids, t), server_state, t)
                theta = theta + step
                if not np.isfinite(theta).all():
                    raise ValueError(f"training diverged in round {t}: the global model is not finite; lower `lr` "
                                     f"(now {cfg.lr}){self._server_hint()}")
                models.append(theta)
                bar.update(1)
        bar.close()
        global_models = np.stack(models)  # (rounds + 1, R, d)
        diff = global_models - theta_star[None]
        error = (diff ** 2).sum(-1).T
        excess = 0.5 * (diff * _times(total, diff)).sum(-1).T / k
        resid = global_models[:, :, None, :] - targets[None]  # (T, R, K, d)
        loss = 0.5 * (resid * _times(self.curvatures[None, None], resid)).sum(-1).mean(-1).T
        return QuadraticResult(replicates=np.asarray(ids), error=error, excess_loss=excess, loss=loss,
                               global_models=global_models, theta_star=theta_star, targets=targets)

    def _server_hint(self) -> str:
        """What a divergence message adds where the server optimizer is not the plain sum."""
        if self.server_optimizer == "sgd" and self.server_params["eta"] == 1:
            return ""
        return f" or the server's `eta` (now {self.server_params['eta']}, server_optimizer {self.server_optimizer!r})"

    def _round(self, theta: np.ndarray, targets: np.ndarray, ids: list[int], t: int) -> np.ndarray:
        """The rule's combination of the clients' updates in round `t` from the global model
        `theta` (R, d): Delta_t, before the server optimizer."""
        updates, side = [], []
        info: np.ndarray | None
        for c in range(self.task.n_clients):
            update, info = self.train_client(c, theta, targets[:, c], ids, t)
            updates.append(update)
            side.append(info)
        stacked = np.stack(updates, axis=1)  # (R, K, d)
        if not np.isfinite(stacked).all():
            raise ValueError(f"training diverged in round {t}: a client's model update is not finite; lower "
                             f"`lr` (now {self.config.lr}){self._server_hint()}")
        extra = {}
        if isinstance(self.rule.side_information, str):
            extra[self.rule.side_information] = np.stack([s for s in side if s is not None], axis=1)
        return np.asarray(self.aggregate(stacked, None, **extra), dtype=np.float64)

    @property
    def gradients_per_round(self) -> int:
        """Gradients of its loss each client computes per round: one per local step, plus its
        side information's: 2 per Hutchinson probe, 1 per empirical-Fisher draw, none for the
        exact curvature (an oracle) or its iterates' variance. FedProx's term and the server
        optimizer cost no gradient."""
        cfg, side = self.config, self.rule.side_information
        extra = 0
        if side == "precisions" and cfg.precision != "exact":
            extra = cfg.n_probes * (2 if cfg.precision == "hutchinson" else 1)
        return cfg.local_steps + extra

    def describe(self) -> dict[str, Any]:
        """The run's settings: the task's, the config's (with the rule's defaults filled in) and the seed."""
        cfg = self.config
        return {"task": self.task.name, "task_settings": dict(self.task.settings), "seed": self.seed,
                "replicates": self.replicates, "rounds": cfg.rounds, "local_steps": cfg.local_steps, "lr": cfg.lr,
                "aggregator": cfg.aggregator, "aggregator_params": {**self.rule.defaults, **cfg.aggregator_params},
                "side_information": self.rule.side_information,
                "precision": cfg.precision if self.rule.side_information == "precisions" else None,
                "n_probes": cfg.n_probes, "burn_in": cfg.burn_in, "init": cfg.init, "shared": list(self.shared),
                "proximal_mu": self.proximal_mu, "server_optimizer": self.server_optimizer,
                "server_params": dict(self.server_params), "gradients_per_round": self.gradients_per_round}
