"""digits-lenet: retrain the last layer of a pretrained LeNet on augmented digits."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._internal.threads import torch_threads, without_onednn
from .._internal.validation import ChoiceSetting, FolderSetting, IntSetting, RealSetting
from .datasets import load_digit_images
from .base import LEARNING_RATE, ClientBatchData, ReplicaGenerators, Task, replica_cross_entropy, replica_logits
from .optimizers import Adam

if TYPE_CHECKING:  # names used only in type hints
    import torch

__all__ = ["default_cache_dir", "build_lenet", "DigitsLeNetTask"]


def default_cache_dir() -> Path:
    """Where pretrained networks are cached: $MIANALYSIS_CACHE or ~/.cache/mianalysis."""
    return Path(os.environ.get("MIANALYSIS_CACHE", Path.home() / ".cache" / "mianalysis"))


def pretrain_code_path():
    """What decides the bytes of a pretraining besides its settings and data: the PyTorch
    version, the CPU capability its kernels use and MKL's reproducibility mode.

    Returns
    -------
    dict
        ``{"torch": torch.__version__, "cpu_capability": ..., "mkl_cbwr": ..., "convolution":
        "aten"}``; the capability as ``torch.backends.cpu.get_cpu_capability()`` reports it
        (it follows ``ATEN_CPU_CAPABILITY``), ``mkl_cbwr`` the ``MKL_CBWR`` variable or None;
        "convolution" says that pretraining runs its convolutions without oneDNN (networks
        cached before that, by oneDNN's CPU-dependent kernels, are not reused).
    """
    import torch

    return {"torch": str(torch.__version__), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "convolution": "aten"}


def build_lenet(image_size: int) -> tuple[torch.nn.Sequential, torch.nn.Linear]:
    """LeNet-5-style network for square grey images; returns (body, head).

    28x28 (MNIST): conv 5x5 (6, padding 2) - pool - conv 5x5 (16) - pool - 400 - 120 - 84.
    8x8 (scikit-learn digits): conv 3x3 (6, padding 1) - pool - conv 3x3 (16, padding 1) -
    pool - 64 - 120 - 84. Both with ReLU; the head is the last fully connected layer
    84 -> 10 (850 parameters).
    """
    from torch import nn

    if image_size >= 28:
        convs = [nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2)]
        flat = 16 * ((image_size // 2 - 4) // 2) ** 2
    else:
        convs = [nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        flat = 16 * (image_size // 4) ** 2
    body = nn.Sequential(*convs, nn.Flatten(), nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
    return body, nn.Linear(84, 10)


HEAD_STARTS = ("pretrained", "random")


class DigitsLeNetTask(Task):
    """Transfer learning as in the core paper's second experiment.

    A LeNet is trained once on the whole training set (deterministic from `data_seed`,
    cached under :func:`default_cache_dir`); then only its last fully connected layer
    (84 -> 10, 850 parameters) is retrained per client. Each client holds
    `per_digit` base images of every digit (200 with the default 20), drawn once per client
    from the training set; every run augments them afresh (random rotation within
    +-`max_rotation` degrees, zoom in [1 - `max_zoom`, 1 + `max_zoom`], shift within
    +-`max_shift` of the image width), so a run's randomness is the initial head, the
    augmentation and the data order. Adam (:class:`mianalysis.tasks.optimizers.Adam`), cross-entropy.

    Where the head starts (`head_start`): "pretrained" (the default and the paper's
    setting) starts from the last layer of the same pretraining that trains the body:
    exactly that layer with ``init="fixed"``, and that layer plus Gaussian noise of sd
    `head_noise` on every weight and bias, drawn per run from the run's generator, with
    ``init="per-run"`` (``head_noise=0`` makes the two the same). "random" starts from a
    fresh head (weights N(0, 1/84), biases 0): drawn per run with ``init="per-run"``, one
    drawn from `data_seed` for all runs with ``init="fixed"``. Both are recorded in a
    dump's settings, so a dump made before `head_start` existed is refused on resume as a
    settings mismatch rather than mixed with runs from another start.

    Data: scikit-learn's 8x8 digits by default (1797 images; 70 % train, 30 % test,
    stratified); MNIST from its standard IDX files when `mnist_path` names their folder.
    Metrics at each checkpoint: "loss" on the client's (augmented) training data and
    "accuracy" on the held-out test set.
    """

    name = "digits-lenet"
    streams = ("order", "augmentation")
    data_stream = "augmentation"
    presets = {
        # The paper retrains the pretrained head: 200 examples, batch 50, Adam 1e-5.
        "paper": {},
        # 200 examples with batch 50 and lr 1e-5 give 4 tiny steps per epoch; 1000 examples
        # (100 per digit) with lr 1e-2 give 20 steps that train a fresh head from ~10 % to
        # ~80 % test accuracy.
        "long": {"per_digit": 100, "lr": 1e-2, "head_start": "random"},
    }
    metric_names = ("loss", "accuracy")
    # The frozen body runs per replica on one thread already (see features); the head's
    # batched steps are small products that a second thread slows down (more CPU seconds
    # per run on 2 threads than on 1). Two cores are used by two sampling processes:
    # ``scheduler="local:2"``.
    sampling_threads = 1

    @staticmethod
    def default_settings() -> dict[str, Any]:
        return {
            "n_clients": 3,
            "per_digit": 20,
            "lr": 1e-5,
            "batch_size": 50,
            "max_rotation": 15.0,
            "max_zoom": 0.1,
            "max_shift": 0.125,
            "mnist_path": None,
            "pretrain_epochs": 30,
            "pretrain_lr": 1e-3,
            "data_seed": 0,
            "head_start": "pretrained",
            "head_noise": 0.01,
        }

    setting_rules = {
        "n_clients": IntSetting(1),
        "per_digit": IntSetting(1),
        "lr": LEARNING_RATE,
        "batch_size": IntSetting(1),
        "max_rotation": RealSetting(0, 180),  # degrees
        "max_zoom": RealSetting(0, 1, high_open=True),  # a zoom of 1 - max_zoom must stay > 0
        "max_shift": RealSetting(0, 1),  # fractions of the image width
        "mnist_path": FolderSetting(),
        "pretrain_epochs": IntSetting(0),  # 0: the body keeps its random initialisation
        "pretrain_lr": LEARNING_RATE,
        "data_seed": IntSetting(0, 2**32 - 1),  # scikit-learn's train/test split takes seeds below 2**32
        "head_start": ChoiceSetting(*HEAD_STARTS),
        # sd of the per-run perturbation of the pretrained head; the pretrained weights have
        # sd ~0.12, and 10 is far beyond any perturbation that keeps them pretrained
        "head_noise": RealSetting(0, 10),
    }

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pretrained: tuple[torch.nn.Sequential, torch.nn.Linear] | None = None  # (body, head)
        self._test_features: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def n_examples(self) -> int:
        return 10 * int(self.settings["per_digit"])

    # ---------------------------------------------------------------- data and body
    def dataset(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(train_images, train_labels, test_images, test_labels), images float32 (n, H, W)."""
        if self._data is None:
            self._data = load_digit_images(self.settings["mnist_path"], int(self.settings["data_seed"]))
        return self._data

    def _pretrain_key(self):
        """The cache key of the pretrained network: everything that decides its bytes.

        The pretraining settings and data, and the code path that computes it: the PyTorch
        version and CPU capability its kernels use (``ATEN_CPU_CAPABILITY`` can lower it)
        and MKL's conditional numerical reproducibility mode (``MKL_CBWR``). Pretraining on
        another instruction set gives other bytes, so a cache shared between machines (a
        home folder on a cluster with mixed CPUs) keeps one network per code path instead
        of mixing them.
        """
        xtr, ytr, _, _ = self.dataset()
        h = hashlib.sha256()
        h.update(json.dumps({k: self.settings[k] for k in ("pretrain_epochs", "pretrain_lr", "data_seed")}).encode())
        h.update(json.dumps(pretrain_code_path()).encode())
        h.update(xtr.tobytes())
        h.update(ytr.tobytes())
        return h.hexdigest()[:16]

    def pretrained(self) -> tuple[torch.nn.Sequential, torch.nn.Linear]:
        """The pretrained (body, head), trained on first use and cached on disk."""
        import torch

        if self._pretrained is None:
            xtr, ytr, _, _ = self.dataset()
            body, head = build_lenet(xtr.shape[-1])
            path = default_cache_dir() / f"lenet-{xtr.shape[-1]}-{self._pretrain_key()}.pt"
            if path.exists():
                state = torch.load(path, map_location="cpu", weights_only=True)
                body.load_state_dict(state["body"])
                head.load_state_dict(state["head"])
            else:
                self._pretrain(body, head, xtr, ytr)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                torch.save({"body": body.state_dict(), "head": head.state_dict()}, tmp)
                os.replace(tmp, path)
            body.eval()
            for p in body.parameters():
                p.requires_grad_(False)
            self._pretrained = (body, head)
        return self._pretrained

    def _pretrain(self, body, head, images, labels):
        import torch

        gen = torch.Generator().manual_seed(int(self.settings["data_seed"]))
        for module in list(body) + [head]:
            if hasattr(module, "weight"):
                bound = 1.0 / math.sqrt(module.weight[0].numel())
                with torch.no_grad():
                    module.weight.uniform_(-bound, bound, generator=gen)
                    module.bias.uniform_(-bound, bound, generator=gen)
        model = torch.nn.Sequential(body, head)
        # torch.optim.Adam's bytes, without the torch._dynamo import its construction costs
        opt = Adam(list(model.parameters()), lr=float(self.settings["pretrain_lr"]))
        x = torch.from_numpy(images).unsqueeze(1)
        y = torch.from_numpy(labels)
        with without_onednn():  # the convolutions' bytes follow the code path, not the CPU
            self._pretrain_epochs(model, opt, x, y, gen)

    def _pretrain_epochs(self, model, opt, x, y, gen):
        import torch

        for _ in range(int(self.settings["pretrain_epochs"])):
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x), 64):
                idx = order[start:start + 64]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()

    def client_base_images(self, client: int) -> np.ndarray:
        """Indices into the training set of the client's base images, `per_digit` per digit."""
        _, ytr, _, _ = self.dataset()
        rng = np.random.default_rng([int(self.settings["data_seed"]), 1000 + int(client)])
        per = int(self.settings["per_digit"])
        picks = []
        for digit in range(10):
            pool = np.flatnonzero(ytr == digit)
            if len(pool) == 0:
                raise ValueError(f"the training set has no image of digit {digit}")
            picks.append(rng.choice(pool, size=per, replace=len(pool) < per))
        return np.concatenate(picks)

    def augment(self, images: np.ndarray, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Random rotation, zoom and shift of `images` (n, H, W), independently per replica:
        returns (R, n, H, W)."""
        import torch
        import torch.nn.functional as F

        s = self.settings
        n = images.shape[0]
        r = len(generators)
        u = torch.stack([torch.rand(n, 4, generator=g) for g in generators])  # (R, n, 4)
        angle = (2 * u[..., 0] - 1) * math.radians(float(s["max_rotation"]))
        zoom = 1 + (2 * u[..., 1] - 1) * float(s["max_zoom"])
        shift = (2 * u[..., 2:] - 1) * 2 * float(s["max_shift"])  # grid units span 2
        cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
        theta = torch.stack([torch.stack([cos, -sin, shift[..., 0]], -1), torch.stack([sin, cos, shift[..., 1]], -1)], -2)
        src = torch.from_numpy(images).unsqueeze(1).expand(r, n, 1, *images.shape[1:]).reshape(r * n, 1, *images.shape[1:])
        grid = F.affine_grid(theta.reshape(r * n, 2, 3), list(src.shape), align_corners=False)
        out = F.grid_sample(src, grid, align_corners=False, padding_mode="zeros")
        return out.reshape(r, n, *images.shape[1:])

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """84-dimensional features of the frozen body for images (H, W), (n, H, W) or
        (R, n, H, W).

        With a replica dimension R the body runs once per replica, and always on one
        thread, so that a replica's features are computed by the same kernels whatever
        the number of replicas and threads (a matrix product's summation order may depend
        on its number of rows and, on some CPU code paths, on how it is split over threads).
        """
        import torch

        with torch.no_grad(), torch_threads(1), without_onednn():
            if images.ndim == 4:
                return torch.stack([self._body_features(replica) for replica in images])
            return self._body_features(images)

    def _body_features(self, images):
        """The body's features of `images` (..., H, W), in the caller's thread and oneDNN
        settings (:meth:`features` sets them)."""
        body, _ = self.pretrained()
        lead = images.shape[:-2]
        feats = body(images.reshape(-1, 1, *images.shape[-2:]))
        return feats.reshape(*lead, feats.shape[-1])

    # ---------------------------------------------------------------- Task interface
    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("fc3.weight", (10, 84)), ("fc3.bias", (10,))]

    def init_params(self, generator: torch.Generator) -> list[torch.Tensor]:
        """A run's initial last layer, drawn from `generator`: with ``head_start="random"``
        a fresh one (weights N(0, 1/84), biases 0); with "pretrained" the pretrained one
        plus N(0, `head_noise`^2) on every weight and bias."""
        import torch

        if self.settings["head_start"] == "random":
            return [torch.randn(10, 84, generator=generator) / math.sqrt(84.0), torch.zeros(10)]
        noise = float(self.settings["head_noise"])
        return [p + noise * torch.randn(p.shape, generator=generator) for p in self._pretrained_head()]

    def fixed_params(self) -> list[torch.Tensor]:
        """The initial last layer of every run with ``init="fixed"``: the pretrained one
        (``head_start="pretrained"``) or one fresh head drawn from `data_seed` ("random")."""
        if self.settings["head_start"] == "random":
            return super().fixed_params()
        return self._pretrained_head()

    def _pretrained_head(self):
        _, head = self.pretrained()
        return [head.weight.detach().clone(), head.bias.detach().clone()]

    def client_data(self, client: int, generators: ReplicaGenerators) -> ClientBatchData:
        import torch

        xtr, ytr, xte, yte = self.dataset()
        idx = self.client_base_images(client)
        # Augmented per replica, like the features: shapes that do not follow the chunk. One
        # thread setting for all replicas: the operations that follow a change of PyTorch's
        # thread count run far slower than these small ones take themselves.
        self.pretrained()
        with torch.no_grad(), torch_threads(1), without_onednn():
            feats = torch.cat([self._body_features(self.augment(xtr[idx], [g])) for g in generators])  # (R, n, 84)
        targets = torch.from_numpy(ytr[idx]).expand(len(generators), len(idx))
        if self._test_features is None:
            self._test_features = (self.features(torch.from_numpy(xte)), torch.from_numpy(yte))
        return ClientBatchData(feats, targets, {"test": self._test_features})

    def forward(self, params: Sequence[torch.Tensor], inputs: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        return replica_logits(params, inputs)

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return replica_cross_entropy(outputs, targets)

    def evaluate(self, params: Sequence[torch.Tensor], data: ClientBatchData) -> dict[str, torch.Tensor]:
        test_x, test_y = data.extra["test"]
        logits = self.forward(params, test_x.expand(params[0].shape[0], *test_x.shape))
        accuracy = (logits.argmax(-1) == test_y).float().mean(1)
        return {"loss": self.loss(self.forward(params, data.inputs), data.targets), "accuracy": accuracy}
