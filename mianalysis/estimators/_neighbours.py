"""How the KSG neighbour counts are computed: which kernel, how much memory it may use,
and the distance matrices behind permutation nulls. The estimator itself (digamma
formula, noise, validation) is :mod:`mianalysis.estimators.ksg`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._internal import memory as _memory
from .._internal.validation import check_k

if TYPE_CHECKING:  # names used only in type hints
    import torch

PERMUTATION_BATCH = 32  # pairings per pass over the distance matrices (brute force)
# Pairings per call of the neighbour-list kernel: its passes over the matrix rows (samples whose k-th joint
# neighbour lies beyond a list) read each row once per call, for all the pairings of the call.
LIST_BATCH = 128
SYMMETRIC_MIN_FEATURES = 100  # below, computing each distance twice in O(n) memory is faster
# float64 counts from checked float32 distances (ksg_counts) from this many samples and features (x and y
# together) on: below, the rows' selection and counts outweigh the distance loops that float32 halves.
CHECKED_MIN_SAMPLES = 512
CHECKED_MIN_FEATURES = 16

# One variable's sorted near-neighbour lists (values, indices, cover): see neighbour_lists.
NeighbourLists = tuple[np.ndarray, np.ndarray, np.ndarray]


def marginal_distances(a: np.ndarray, dtype: DTypeLike = "float64") -> np.ndarray:
    """The (n, n) max-norm distance matrix of the samples `a` (n, d), as the KSG kernel
    computes its distances (bit for bit)."""
    from ._kernels import marginal_distance_matrix

    a = np.ascontiguousarray(a, dtype=dtype)
    out = np.empty((a.shape[0], a.shape[0]), dtype=dtype)
    marginal_distance_matrix(a, np.ascontiguousarray(a.T), out)
    return out


def check_torch_device(device: str | torch.device | None) -> torch.device:
    """The torch.device for `device` (None: "cuda" when available, else "cpu"); ValueError
    naming `device` if torch does not know it or this machine does not have it, ImportError
    if PyTorch is not installed."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError("backend='torch' needs PyTorch, which is not installed: install torch, "
                          "or use backend='numba'") from exc
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"`device` {device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1'): {exc}") from exc
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"`device` {device!r} is not available: PyTorch {torch.__version__} sees no CUDA GPU; "
                             "use device='cpu' or leave `device` unset")
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"`device` {device!r} is not available: PyTorch sees {count} CUDA GPU(s), "
                             f"cuda:0 to cuda:{count - 1}")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"`device` {device!r} is not available: PyTorch {torch.__version__} sees no MPS device; "
                         "use device='cpu' or leave `device` unset")
    return dev


def ksg_counts_torch(x: np.ndarray, y: np.ndarray, k: int, algorithm: int, dtype: DTypeLike = "float64",
                     device: str | torch.device | None = None, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ksg_counts` with PyTorch: rows in blocks of `block`, full marginal rows by
    ``torch.cdist(p=inf)``, the k-th joint distance by ``topk``, counts by comparisons."""
    k = check_k(k, x.shape[0])  # topk needs k other samples in every row
    device = check_torch_device(device)
    import torch

    tdtype = torch.float64 if dtype == "float64" else torch.float32
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=tdtype, device=device)
    yt = torch.as_tensor(np.ascontiguousarray(y), dtype=tdtype, device=device)
    n = xt.shape[0]
    nx = torch.empty(n, dtype=torch.int64, device=device)
    ny = torch.empty(n, dtype=torch.int64, device=device)
    for r0 in range(0, n, block):
        r1 = min(r0 + block, n)
        rows = torch.arange(r1 - r0, device=device)
        dx = torch.cdist(xt[r0:r1], xt, p=float("inf"))
        dy = torch.cdist(yt[r0:r1], yt, p=float("inf"))
        joint = torch.maximum(dx, dy)
        joint[rows, rows + r0] = float("inf")  # a sample is not its own neighbour
        eps = torch.topk(joint, k, dim=1, largest=False).values[:, -1:]
        if algorithm == 1:
            cx = (dx < eps).sum(1) - 1  # the sample itself is at distance 0 < eps
            cy = (dy < eps).sum(1) - 1
            if bool((eps <= 0).any()):  # eps = 0: the self pair was not counted
                cx = cx + (eps[:, 0] <= 0)
                cy = cy + (eps[:, 0] <= 0)
        else:
            within = joint <= eps
            zero = torch.zeros((), dtype=tdtype, device=device)
            eps_x = torch.where(within, dx, zero).amax(1, keepdim=True)
            eps_y = torch.where(within, dy, zero).amax(1, keepdim=True)
            cx = (dx <= eps_x).sum(1) - 1
            cy = (dy <= eps_y).sum(1) - 1
        nx[r0:r1] = cx
        ny[r0:r1] = cy
    return nx.cpu().numpy(), ny.cpu().numpy()


def check_distance_cache(distance_cache: object) -> bool | str:
    """`distance_cache` itself if it is "auto", True or False; else ValueError naming it."""
    if distance_cache not in ("auto", True, False):
        raise ValueError(f"`distance_cache` must be 'auto', True or False; got {distance_cache!r}")
    return distance_cache


def use_distance_cache(distance_cache: bool | str, n_bytes: int) -> bool:
    """Whether to keep `n_bytes` of distances in memory: always for True, never for False,
    for "auto" when they take at most half the memory this process can still allocate
    (:func:`mianalysis._internal.memory.available_memory_bytes`: physical memory, cgroup limits, ``ulimit -v``); else
    the caller computes in O(n) memory."""
    check_distance_cache(distance_cache)
    if distance_cache == "auto" and n_bytes > 0:
        # The kernels that will use the cache first: loading Numba and LLVM takes some 200 MB of
        # address space, which counts against `ulimit -v` and must not be taken for free room.
        from . import _kernels  # noqa: F401
    return distance_cache is True or (distance_cache == "auto" and n_bytes <= _memory.available_memory_bytes() / 2)


def ksg_counts(x: np.ndarray, y: np.ndarray, k: int, algorithm: int, dtype: DTypeLike = "float64",
               distance_cache: bool | str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Neighbour counts of every sample: validated 2-D `x`, `y` in, int64 arrays out.

    With the distance cache (see :func:`symmetric_cache_bytes`) every distance is computed
    once; without it, twice, in O(n) memory. The counts are the same either way.
    """
    from ._checked_kernels import checked_neighbour_counts, float32_copy
    from ._kernels import ksg_neighbour_counts

    k = check_k(k, x.shape[0])  # the kernels read k neighbours per row without a bound check
    x = np.ascontiguousarray(x, dtype=dtype)
    y = np.ascontiguousarray(y, dtype=dtype)
    # The cache saves half of the O(n^2 d) distance work and adds O(n^2) memory traffic:
    # with "auto" it is used from SYMMETRIC_MIN_FEATURES features (x and y together) on.
    wide = x.shape[1] + y.shape[1] >= SYMMETRIC_MIN_FEATURES
    # float64 counts from float32 distances checked in float64 (_checked_kernels.py): the same counts at about
    # twice the distance rate.
    checked = None
    if checks_float32_distances(x.shape[0], x.shape[1] + y.shape[1], x.dtype):
        copies = float32_copy(x), float32_copy(y)
        if copies[0] is not None and copies[1] is not None:
            checked = (copies[0][0], copies[1][0], copies[0][1], copies[1][1])
    distance_dtype = np.float32 if checked is not None else x.dtype
    if (distance_cache is True or wide) and use_distance_cache(
            distance_cache, symmetric_cache_bytes(x.shape[0], distance_dtype)):
        return ksg_counts_symmetric(x, y, int(k), int(algorithm), checked)
    if checked is not None:
        x32, y32, tol_x, tol_y = checked
        return checked_neighbour_counts(x, y, x32, y32, np.ascontiguousarray(x32.T), np.ascontiguousarray(y32.T),
                                        tol_x, tol_y, int(k), int(algorithm))
    return ksg_neighbour_counts(
        x, y, np.ascontiguousarray(x.T), np.ascontiguousarray(y.T), int(k), int(algorithm)
    )


def checks_float32_distances(n_samples: int, n_features: int, dtype: DTypeLike) -> bool:
    """Whether :func:`ksg_counts` computes float64 data's distances in float32 and checks
    them in float64 (_checked_kernels.py) for this many samples and features (x and y
    together), data whose centred scale float32 holds (nearly all) assumed."""
    return np.dtype(dtype) == np.float64 and n_samples >= CHECKED_MIN_SAMPLES and n_features >= CHECKED_MIN_FEATURES


def symmetric_pool_tiles(n_samples: int) -> int:
    """Most transposed tiles :func:`ksg_counts_symmetric` holds at once per side: after
    row block m, the tiles (J, I) with I <= m < J."""
    from ._kernels import BLOCK

    n_blocks = -(-n_samples // BLOCK)
    return max(1, max((m + 1) * (n_blocks - 1 - m) for m in range(n_blocks)))


def symmetric_cache_bytes(n_samples: int, dtype: DTypeLike) -> int:
    """Memory of :func:`ksg_counts_symmetric`: about n^2 / 4 distances per side."""
    from ._kernels import BLOCK

    per_side = symmetric_pool_tiles(n_samples) * BLOCK * BLOCK + BLOCK * n_samples
    return 2 * per_side * np.dtype(dtype).itemsize


def ksg_counts_symmetric(x: np.ndarray, y: np.ndarray, k: int, algorithm: int,
                         checked: tuple[np.ndarray, np.ndarray, float, float] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour counts computing each distance once: row blocks in order, each block's
    tiles right of the diagonal computed and kept transposed for the later blocks' rows.
    `x`, `y` C-contiguous of one float dtype. With `checked` (for float64 `x`, `y`: their
    float32 copies and tolerances from :func:`float32_copy`), the distances are float32 and
    the counts checked in float64."""
    from ._checked_kernels import checked_block_row_counts
    from ._kernels import BLOCK, block_row_counts, symmetric_block_rows

    x64, y64 = x, y
    tol_x = tol_y = 0.0
    if checked is not None:
        x, y, tol_x, tol_y = checked
    n = x.shape[0]
    n_blocks = -(-n // BLOCK)
    tiles = symmetric_pool_tiles(n)
    pool_x = np.empty((tiles, BLOCK, BLOCK), dtype=x.dtype)
    pool_y = np.empty_like(pool_x)
    rows_x = np.empty((BLOCK, n), dtype=x.dtype)
    rows_y = np.empty_like(rows_x)
    x_t = np.ascontiguousarray(x.T)
    y_t = np.ascontiguousarray(y.T)
    nx = np.empty(n, dtype=np.int64)
    ny = np.empty(n, dtype=np.int64)
    free = list(range(tiles))
    held: dict[tuple[int, int], int] = {}  # (row block, column block) -> pool slot of that tile, stored transposed
    for m in range(n_blocks):
        old_slots = np.array([held.pop((m, block)) for block in range(m)], dtype=np.int64)
        free.extend(old_slots.tolist())  # copied out before the new tiles are written
        new_slots = np.full(n_blocks, -1, dtype=np.int64)
        for block in range(m + 1, n_blocks):
            new_slots[block] = held[(block, m)] = free.pop()
        symmetric_block_rows(x, x_t, y, y_t, m, rows_x, rows_y, pool_x, pool_y, old_slots, new_slots)
        if checked is None:
            block_row_counts(rows_x, rows_y, m * BLOCK, min((m + 1) * BLOCK, n), k, algorithm, nx, ny)
        else:
            checked_block_row_counts(rows_x, rows_y, x64, y64, tol_x, tol_y, m * BLOCK, min((m + 1) * BLOCK, n), k,
                                     algorithm, nx, ny)
    return nx, ny


# Permutation nulls from sorted neighbour lists (_neighbour_lists.py): used from LIST_MIN_SAMPLES samples and
# LIST_MIN_PAIRINGS pairings (the identity included) on; below, the brute-force pass over two rows is as cheap.
LIST_MIN_SAMPLES = 1000
LIST_MIN_PAIRINGS = 8
# A list aims at LIST_FACTOR sqrt(k n) neighbours (under independence a sample's k-th joint neighbour lies among
# its ~sqrt(k n) nearest marginal ones) and holds at most LIST_CAPACITY times that.
LIST_FACTOR = 3.0
LIST_CAPACITY = 1.5


def neighbour_list_length(n_samples: int, k: int) -> tuple[int, int]:
    """(aimed length, capacity) of the neighbour lists for `n_samples` samples and `k`."""
    length = min(n_samples - 1, max(32, int(LIST_FACTOR * np.sqrt(k * n_samples))))
    return length, min(n_samples - 1, int(LIST_CAPACITY * length))


def list_bytes(n_samples: int, k: int, dtype: DTypeLike = "float64") -> int:
    """Memory of one marginal's neighbour lists."""
    _, capacity = neighbour_list_length(n_samples, k)
    return n_samples * (capacity + 1) * (np.dtype(dtype).itemsize + 4)


def list_workspace_bytes(n_samples: int, dtype: DTypeLike = "float64") -> int:
    """Memory :func:`neighbour_lists` holds while it lists from tiles: each thread's block of
    candidates (BLOCK rows of n_samples distances and int32 indices)."""
    import numba

    from ._kernels import BLOCK

    return numba.get_num_threads() * BLOCK * n_samples * (np.dtype(dtype).itemsize + 4)


def neighbour_lists(d: np.ndarray, k: int, n_samples: int | None = None) -> NeighbourLists:
    """(values, indices, cover): the sorted near-neighbour lists of the rows of the distance
    matrix `d`, or of its tiles (:func:`distance_tiles`; then give `n_samples`); see
    :func:`mianalysis.estimators._neighbour_lists.neighbour_lists`."""
    import numba

    from . import _neighbour_lists

    n = d.shape[0] if n_samples is None else n_samples
    length, capacity = neighbour_list_length(n, k)
    values = np.empty((n, capacity + 1), dtype=d.dtype)
    indices = np.empty((n, capacity + 1), dtype=np.int32)
    cover = np.empty(n, dtype=d.dtype)
    _neighbour_lists.neighbour_lists(d, int(length), values, indices, cover, numba.get_num_threads())
    return values, indices, cover


def distance_tiles(x: np.ndarray, y: np.ndarray, dtype: DTypeLike = "float64") -> tuple[np.ndarray, np.ndarray]:
    """Both marginal distance matrices of the samples `x` and `y` as their upper-triangle
    tiles (:func:`mianalysis.estimators._kernels.marginal_distance_tiles`): each distance
    computed and stored once, the same values to the bit as :func:`marginal_distances`, in
    about half their memory (:func:`tile_bytes`)."""
    from ._kernels import BLOCK, marginal_distance_tiles

    x = np.ascontiguousarray(x, dtype=dtype)
    y = np.ascontiguousarray(y, dtype=dtype)
    n_blocks = -(-x.shape[0] // BLOCK)
    tiles_x = np.empty((n_blocks * (n_blocks + 1) // 2, BLOCK, BLOCK), dtype=dtype)
    tiles_y = np.empty_like(tiles_x)
    marginal_distance_tiles(x, np.ascontiguousarray(x.T), y, np.ascontiguousarray(y.T), tiles_x, tiles_y)
    return tiles_x, tiles_y


def tile_bytes(n_samples: int, dtype: DTypeLike = "float64") -> int:
    """Memory of one marginal's :func:`distance_tiles`."""
    from ._kernels import BLOCK

    n_blocks = -(-n_samples // BLOCK)
    return n_blocks * (n_blocks + 1) // 2 * BLOCK * BLOCK * np.dtype(dtype).itemsize


def use_lists(n_samples: int, n_pairings: int, method: str = "auto") -> bool:
    """Whether :func:`permuted_counts` walks neighbour lists: "auto" from LIST_MIN_SAMPLES
    samples and LIST_MIN_PAIRINGS pairings on, "lists" always, "brute" never."""
    if method not in ("auto", "lists", "brute"):
        raise ValueError(f"`method` must be 'auto', 'lists' or 'brute'; got {method!r}")
    return method == "lists" or (method == "auto" and n_samples >= LIST_MIN_SAMPLES
                                 and n_pairings >= LIST_MIN_PAIRINGS)


def permuted_counts(dx: np.ndarray, dy: np.ndarray, permutations: ArrayLike, k: int, algorithm: int, *,
                    method: str = "auto", lists: tuple[NeighbourLists, NeighbourLists] | None = None,
                    stats: dict[str, np.ndarray] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (nx, ny) for the pairing x[i] <-> y[perm[i]] of each permutation, from the
    marginal distance matrices, PERMUTATION_BATCH pairings per pass (LIST_BATCH with the
    lists); the same counts, exactly, whichever way.

    Brute force: two rows of n distances per sample, O(n^2) per pairing. Neighbour lists
    (:func:`use_lists` with `method`): each row's nearest marginal neighbours sorted once
    per matrix (O(n^2) plus a sort of about LIST_FACTOR sqrt(k n) values per row; `lists`,
    a (lists of dx, lists of dy) pair, gives them when already made), then about
    O(n sqrt(k n)) per pairing; a sample whose k-th joint neighbour lies beyond its lists
    is counted by walking its deeper list and looking the other distance up in the
    matrix, or, when that list is too short as well, from its full rows. `stats`, a dict,
    receives "looked_up" and "full_rows": the samples so counted, per pairing (arrays;
    empty for brute force).
    """
    from ._kernels import permuted_neighbour_counts

    k = check_k(k, dx.shape[0])
    n = dx.shape[0]
    perms = np.asarray(permutations, dtype=np.int64).reshape(-1, n)
    if use_lists(n, perms.shape[0], method):
        yield from listed_counts(dx, dy, n, perms, k, algorithm, lists=lists, stats=stats)
        return
    for start in range(0, perms.shape[0], PERMUTATION_BATCH):
        batch = np.ascontiguousarray(perms[start:start + PERMUTATION_BATCH])
        yield from zip(*permuted_neighbour_counts(dx, dy, batch, k, algorithm))
    if stats is not None:
        stats["looked_up"] = stats["full_rows"] = np.zeros(0, dtype=np.int64)


def listed_counts(dx: np.ndarray, dy: np.ndarray, n: int, perms: ArrayLike, k: int, algorithm: int, *,
                  lists: tuple[NeighbourLists, NeighbourLists] | None = None,
                  stats: dict[str, np.ndarray] | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`permuted_counts` by neighbour lists, from full distance matrices or from their
    tiles (:func:`distance_tiles`), LIST_BATCH pairings per call of the kernel."""
    from ._neighbour_lists import listed_neighbour_counts

    lists_x, lists_y = lists if lists is not None else (neighbour_lists(dx, k, n), neighbour_lists(dy, k, n))
    perms = np.asarray(perms, dtype=np.int64).reshape(-1, n)
    full_rows, looked_up = [], []
    small = np.uint16 if n <= np.iinfo(np.uint16).max else np.int32  # inverses stay in cache
    for start in range(0, perms.shape[0], LIST_BATCH):
        batch = np.ascontiguousarray(perms[start:start + LIST_BATCH])
        inverses = np.full(batch.shape, n, dtype=np.int64)
        if batch.size and (batch.min() < 0 or batch.max() >= n):
            raise ValueError(f"`permutations` must be permutations of range({n})")
        np.put_along_axis(inverses, batch, np.arange(n)[None, :], axis=1)
        if (inverses == n).any():  # a value repeated, so another one missing
            raise ValueError(f"`permutations` must be permutations of range({n})")
        nx, ny, looked, full = listed_neighbour_counts(*lists_x, *lists_y, dx, dy, batch, inverses.astype(small),
                                                       k, algorithm)
        looked_up.append(looked)
        full_rows.append(full)
        yield from zip(nx, ny)
    if stats is not None:
        for name, parts in (("looked_up", looked_up), ("full_rows", full_rows)):
            stats[name] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
