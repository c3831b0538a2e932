"""Sketches of large parameter vectors: a seeded random projection of each tensor, recorded
in a dump instead of the tensor.

A ResNet-18 has 11 M parameters: 1,000 runs of 3 clients at one checkpoint are 132 GB of
float32, and the dump, the distances and the estimators would hold whole vectors. A
:class:`Sketch` given to :class:`~mianalysis.dumps.writer.DumpWriter` (``sketch=``) or to
:class:`~mianalysis.tasks.ModuleTask` records, for each tensor larger than its sketch, the
tensor's projection onto `size` rows instead: the same projection for every client and
run, made from the seed and the tensor's name and shape (never stored, never a dense
matrix). The manifest records the sketch; the dump's layout is the sketch's, each sketched
tensor named ``NAME[sketch]`` (:data:`SKETCH_SUFFIX`) with shape ``(rows,)``.

What a sketched dump measures:

- Euclidean distances between clients (and the cosines of their updates) are the
  parameters' up to the Johnson-Lindenstrauss error (see :class:`Sketch`, :func:`jl_error`).
  Manhattan and Chebyshev distances are not preserved.
- MI between the sketches is the MI of projections of the parameters: at most the MI of
  the parameters (data processing inequality), since a sketch is a function of them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._internal.validation import check_choice, check_int, check_real

__all__ = ["Sketch", "SKETCH_KINDS", "SKETCH_SPLITS", "SKETCH_SUFFIX", "JL_CONSTANT", "jl_error", "jl_size",
           "sketch_from_record"]

SKETCH_KINDS = ("sparse-sign",)
SKETCH_SPLITS = ("tensor", "total")
# Appended to the name of a sketched tensor in a dump's layout.
SKETCH_SUFFIX = "[sketch]"
# C of the Johnson-Lindenstrauss size m >= C ln(1/delta) / eps**2 (see Sketch, Notes).
JL_CONSTANT = 2.0


def jl_size(eps: float, delta: float = 0.05) -> int:
    """The sketch size m = ceil(C ln(1/delta) / eps**2) (C = :data:`JL_CONSTANT`) for which a
    distance between sketches is within relative error `eps` of the parameters' with
    probability at least 1 - `delta` (see :class:`Sketch`).

    Examples
    --------
    >>> from mianalysis.dumps.sketch import jl_size
    >>> jl_size(0.05), jl_size(0.05, delta=0.01)
    (2397, 3685)
    """
    eps = check_real(eps, "eps", low=0, low_open=True)
    delta = check_real(delta, "delta", low=0, high=1, low_open=True, high_open=True)
    return math.ceil(JL_CONSTANT * math.log(1 / delta) / eps ** 2)


def jl_error(size: int, delta: float = 0.05) -> float:
    """The relative error eps = sqrt(C ln(1/delta) / size) of a distance between sketches of
    `size` rows, exceeded with probability at most `delta` (the inverse of :func:`jl_size`).

    Examples
    --------
    >>> from mianalysis.dumps.sketch import jl_error
    >>> round(jl_error(2048), 4)
    0.0541
    """
    size = check_int(size, "size", low=1)
    delta = check_real(delta, "delta", low=0, high=1, low_open=True, high_open=True)
    return math.sqrt(JL_CONSTANT * math.log(1 / delta) / size)


@dataclass(frozen=True)
class Sketch:
    """A seeded sparse random projection of each tensor of a parameter vector.

    Parameters
    ----------
    size : int
        Rows of the sketch: of each tensor (``split="tensor"``) or of the whole vector,
        shared by the tensors in proportion to their sizes (``split="total"``, each at
        least 1 row). A tensor of at most its rows is recorded whole, as it is.
    seed : int, default=0
        With a tensor's name and shape, decides its projection: give every client and run
        the same sketch (the writer and the sampler do).
    kind : {"sparse-sign"}, default="sparse-sign"
        A sparse sign projection (Kane and Nelson 2014; CountSketch when `nnz` is 1): the
        rows are split into `nnz` blocks and each input coordinate goes to one row of each
        block, chosen by an integer hash, with a random sign, scaled by 1/sqrt(nnz). Cost
        O(nnz) per coordinate, memory O(tensor); linear.
    nnz : int, default=4
        Non-zeros per input coordinate (at most the tensor's rows).
    split : {"tensor", "total"}, default="tensor"
        How `size` is read (see `size`). "tensor" keeps every tensor's error at that of
        `size` rows, so per-layer rows of an analysis are as good as the whole vector's.

    Notes
    -----
    **Distances (Johnson-Lindenstrauss).** For a sketch of m rows and two vectors x, y,
    the sketched distance is within a relative error eps of theirs,
    ``| |Sx - Sy| - |x - y| | <= eps |x - y|``, with probability at least 1 - delta when
    ``m >= C ln(1/delta) / eps**2``, C = :data:`JL_CONSTANT` = 2 (:func:`jl_size`,
    :func:`jl_error`: m = 2048 gives eps = 0.054 at delta = 0.05). For a Gaussian
    projection this follows from the chi-square tail bounds of Laurent and Massart (2000)
    for delta <= 0.1 and eps <= 0.2. For the sparse sign sketch the squared norm of the
    sketch of a unit vector u has mean 1 and variance (2/m)(1 - sum u_i**4), at most a
    Gaussian projection's 2/m; when the difference is spread over many coordinates (as
    parameter differences are) its error is nearly normal, with sd 1/sqrt(2m) on the
    distance, and C = 2 leaves the bound a margin (tests/test_sketch.py checks it on
    Gaussian, heavy-tailed and sparse differences). A difference on one coordinate is kept
    exactly; one on a few coordinates that share rows is the worst case, which needs
    `nnz` of order ln(1/delta)/eps for the bound to hold for every vector (Kane and Nelson).
    With ``split="tensor"`` each sketched tensor has m = `size` rows; a whole vector's
    distance is within eps when every tensor's is (squared distances add), so with
    probability at least 1 - (sketched tensors) x delta, and usually much better (the
    tensors' errors average). Cosines of updates move by about eps (inner products are
    preserved up to eps |u| |v|).

    **MI.** A sketch is a function of the parameters, so the MI between two clients'
    sketches is at most the MI between their parameters (data processing inequality); it
    is the MI of projections, not of the parameters.

    **Determinism.** Rows and signs come from integer hashes of (seed, name, shape, size,
    nnz) and the coordinate (:mod:`mianalysis.dumps._sketch_kernels`), the sums are float64
    in a fixed order: the same sketch on any machine and in any process, and for a replica
    whatever batch it is sketched in.

    References
    ----------
    Johnson and Lindenstrauss (1984), Contemp. Math. 26, 189-206. Dasgupta and Gupta (2003),
    Random Struct. Algorithms 22(1), 60-65. Laurent and Massart (2000), Ann. Statist. 28(5),
    1302-1338. Kane and Nelson (2014), "Sparser Johnson-Lindenstrauss transforms", J. ACM
    61(1), 4.

    Examples
    --------
    >>> import numpy as np
    >>> from mianalysis.dumps import Sketch
    >>> sketch = Sketch(size=256, seed=1)
    >>> shapes = [("conv.weight", (64, 3, 3, 3)), ("conv.bias", (64,))]
    >>> sketch.layout(shapes)                  # the bias (64 <= 256 values) is kept whole
    [('conv.weight[sketch]', (256,)), ('conv.bias', (64,))]
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.standard_normal(1728), rng.standard_normal(1728)
    >>> sx = sketch.project("conv.weight", x.reshape(64, 3, 3, 3), size=256)
    >>> sy = sketch.project("conv.weight", y.reshape(64, 3, 3, 3), size=256)
    >>> bool(abs(np.linalg.norm(sx - sy) / np.linalg.norm(x - y) - 1) < sketch.error(256))
    True
    """

    size: int
    seed: int = 0
    kind: str = "sparse-sign"
    nnz: int = 4
    split: str = "tensor"

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_int(self.size, "size", low=1))
        object.__setattr__(self, "seed", check_int(self.seed, "seed", low=0, high=2**63 - 1))
        check_choice(self.kind, "kind", SKETCH_KINDS)
        object.__setattr__(self, "nnz", check_int(self.nnz, "nnz", low=1))
        check_choice(self.split, "split", SKETCH_SPLITS)

    # ------------------------------------------------------------------ sizes and layout
    def sizes(self, shapes: Iterable[tuple[str, Sequence[int]]]) -> list[int]:
        """Rows of each tensor of the (name, shape) pairs `shapes`: its number of values
        where it is kept whole (at most its rows)."""
        counts = [math.prod(int(s) for s in shape) for _, shape in shapes]
        if self.split == "tensor":
            return [min(n, self.size) for n in counts]
        total = sum(counts)
        if total <= self.size:
            return counts
        quotas = [self.size * n / total for n in counts]
        rows = [min(n, max(1, math.floor(q))) if n else 0 for n, q in zip(counts, quotas)]
        left = self.size - sum(rows)
        # The rows left go to the largest remainders (ties: the first tensor), never above a tensor's size.
        for i in sorted(range(len(counts)), key=lambda i: (-(quotas[i] - math.floor(quotas[i])), i)):
            if left <= 0:
                break
            if rows[i] < counts[i]:
                rows[i] += 1
                left -= 1
        return rows

    def layout(self, shapes: Iterable[tuple[str, Sequence[int]]]) -> list[tuple[str, tuple[int, ...]]]:
        """The (name, shape) pairs of a dump recording this sketch of tensors `shapes`: a
        sketched tensor is ``(NAME[sketch], (rows,))``, one kept whole its own pair."""
        pairs = [(str(n), tuple(int(s) for s in shape)) for n, shape in shapes]
        return [(n, shape) if m == math.prod(shape) else (n + SKETCH_SUFFIX, (m,))
                for (n, shape), m in zip(pairs, self.sizes(pairs))]

    def error(self, size: int | None = None, delta: float = 0.05) -> float:
        """The relative error of a distance between sketches of `size` rows (default this
        sketch's `size`) exceeded with probability at most `delta` (:func:`jl_error`)."""
        return jl_error(self.size if size is None else size, delta)

    # ------------------------------------------------------------------ projections
    def project(self, name: str, values: Any, *, size: int, batch_dims: int = 0) -> np.ndarray:
        """The sketch of `size` rows of the tensor `name` holding `values`.

        Parameters
        ----------
        name : str
            The tensor's name (it decides the projection, with its shape and `size`).
        values : array-like of shape (*batch, *shape)
            The tensor, after `batch_dims` leading dimensions of replicas (each sketched
            alone, as if given by itself).
        size : int
            Rows (:meth:`sizes`); at least the tensor's number of values: the tensor is
            returned whole.
        batch_dims : int, default=0

        Returns
        -------
        numpy.ndarray of shape (*batch, size), or (*batch, *shape) for a tensor kept whole
            float32 for float32 input (float16 too), else float64.
        """
        values = np.asarray(values)
        batch_dims = check_int(batch_dims, "batch_dims", low=0, high=values.ndim)
        size = check_int(size, "size", low=0)
        batch, shape = values.shape[:batch_dims], values.shape[batch_dims:]
        n = math.prod(shape)
        dtype = np.float32 if values.dtype in (np.float32, np.float16) else np.float64
        if size >= n:
            return values.astype(dtype, copy=True)
        if size == 0:
            raise ValueError(f"`size` must be >= 1 for tensor {name!r} of {n} values; got 0")
        from ._sketch_kernels import sparse_sign  # numba: loaded only when a sketch is made

        nnz = min(self.nnz, size)
        flat = np.ascontiguousarray(values.reshape(math.prod(batch), n), dtype=dtype)
        out = np.zeros((flat.shape[0], size))
        sparse_sign(flat, size, nnz, np.uint64(self._key(name, shape, size)), out)
        out *= 1 / math.sqrt(nnz)
        return out.astype(dtype, copy=False).reshape(*batch, size)

    def apply(self, named: Iterable[tuple[str, Any]] | Mapping[str, Any], *,
              batch_dims: int = 0) -> list[tuple[str, np.ndarray]]:
        """The sketch of each tensor of `named` ((name, array) pairs or a mapping), in its
        order: (name in the layout, sketch), as :meth:`layout` names them; `batch_dims`
        leading dimensions of replicas (see :meth:`project`)."""
        pairs = list(named.items()) if isinstance(named, Mapping) else list(named)
        arrays = [(str(n), np.asarray(a)) for n, a in pairs]
        shapes = [(n, a.shape[batch_dims:]) for n, a in arrays]
        out = []
        for (name, a), (layout_name, _), m in zip(arrays, self.layout(shapes), self.sizes(shapes)):
            out.append((layout_name, self.project(name, a, size=m, batch_dims=batch_dims)))
        return out

    def apply_vector(self, vector: Any, shapes: Iterable[tuple[str, Sequence[int]]]) -> np.ndarray:
        """The sketch of the flat parameter vector `vector` (its last axis the tensors
        `shapes` one after the other), flat: the vector a sketched dump stores."""
        vector = np.asarray(vector)
        shapes = [(str(n), tuple(int(s) for s in shape)) for n, shape in shapes]
        batch, parts, at = vector.shape[:-1], [], 0
        for (name, shape), m in zip(shapes, self.sizes(shapes)):
            n = math.prod(shape)
            part = self.project(name, vector[..., at:at + n].reshape(*batch, *shape), size=m, batch_dims=len(batch))
            parts.append(part.reshape(*batch, -1))
            at += n
        if at != vector.shape[-1]:
            raise ValueError(f"`vector` has {vector.shape[-1]} values; the tensors `shapes` have {at}")
        return np.concatenate(parts, axis=-1)

    def _key(self, name: str, shape: Sequence[int], size: int) -> int:
        """The 64-bit key of a tensor's projection: SHA-256 of (kind, seed, nnz, name, shape, size)."""
        text = json.dumps([self.kind, self.seed, min(self.nnz, size), name, [int(s) for s in shape], int(size)])
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")

    # ------------------------------------------------------------------ records
    def to_json(self) -> dict[str, Any]:
        """The settings as JSON values (a task's settings, the manifest's ``sketch``)."""
        return {"kind": self.kind, "size": self.size, "seed": self.seed, "nnz": self.nnz, "split": self.split}

    def record(self, shapes: Iterable[tuple[str, Sequence[int]]]) -> dict[str, Any]:
        """The manifest's ``sketch`` of a dump recording this sketch of tensors `shapes`: the
        settings and each tensor's name, shape and rows."""
        shapes = [(str(n), [int(s) for s in shape]) for n, shape in shapes]
        return {**self.to_json(), "tensors": [{"name": n, "shape": s, "size": m}
                                              for (n, s), m in zip(shapes, self.sizes(shapes))]}

    def describe(self) -> str:
        """One line: ``sparse-sign, 2048 rows per tensor, nnz 4, seed 0``."""
        per = "per tensor" if self.split == "tensor" else "in all"
        return f"{self.kind}, {self.size} rows {per}, nnz {self.nnz}, seed {self.seed}"


def sketch_from_record(record: object, layout: Sequence[tuple[str, Sequence[int]]]
                       ) -> tuple[Sketch, list[tuple[str, tuple[int, ...]]]]:
    """The :class:`Sketch` and the tensors it was taken of ((name, shape) pairs) that a
    manifest's ``sketch`` records; ValueError naming the field unless it is that of a
    sketch whose layout is `layout` ((name, shape) pairs, the dump's)."""
    if not isinstance(record, dict):
        raise ValueError(f"must be an object; got {type(record).__name__}")
    settings = {k: record[k] for k in ("kind", "size", "seed", "nnz", "split") if k in record}
    try:
        sketch = Sketch(**settings)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    tensors = record.get("tensors")
    if not isinstance(tensors, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("shape"), list)
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in t["shape"]) for t in tensors):
        raise ValueError("`tensors` must be a list of {name, shape, size}")
    source = [(t["name"], tuple(t["shape"])) for t in tensors]
    if [t.get("size") for t in tensors] != sketch.sizes(source):
        raise ValueError(f"`tensors` sizes must be {sketch.sizes(source)}, the rows of the sketch; got "
                         f"{[t.get('size') for t in tensors]}")
    expected = sketch.layout(source)
    if [(n, tuple(s)) for n, s in layout] != expected:
        raise ValueError(f"the layout must be the sketch's of its tensors, {expected[:3]}...; it is not")
    return sketch, source
