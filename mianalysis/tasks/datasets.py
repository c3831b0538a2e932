"""Embedded and user-supplied data sets: scikit-learn's 8x8 digits, and MNIST read from the
IDX files it is distributed in (optionally gzip-compressed) where the user points at them.
Nothing is downloaded."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["read_idx", "write_idx", "load_mnist", "load_digit_images"]

_DTYPES: dict[int, str] = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file into an array; raises ValueError naming the file if it is not one."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_DTYPES[raw[2]])
    want = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != want:
        raise ValueError(f"{path}: header says shape {shape} ({want} bytes) but the file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def write_idx(path: str | os.PathLike, array: ArrayLike) -> None:
    """Write a uint8 array as an IDX file (used by tests to build tiny MNIST files)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    Path(path).write_bytes(header + array.tobytes())


def _find(folder, stem):
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"{folder} has no {stem} (or {stem}.gz): expected the standard MNIST IDX files")


def load_mnist(folder: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images, train_labels, test_images, test_labels) from a folder of MNIST IDX
    files; images as float32 in [0, 1] of shape (n, 28, 28)."""
    folder = Path(folder)
    parts = []
    for prefix in ("train", "t10k"):
        images = read_idx(_find(folder, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(folder, f"{prefix}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{folder}: {prefix} images {images.shape} and labels {labels.shape} do not match")
        parts += [images.astype(np.float32) / 255.0, labels.astype(np.int64)]
    train_images, train_labels, test_images, test_labels = parts
    return train_images, train_labels, test_images, test_labels


def load_digit_images(mnist_path: str | os.PathLike | None = None, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images, train_labels, test_images, test_labels), images float32 in [0, 1] of
    shape (n, H, W): MNIST from the IDX files in `mnist_path`, else scikit-learn's 8x8
    digits split 70 / 30 (stratified, shuffled by `seed`)."""
    if mnist_path:
        return load_mnist(mnist_path)
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(images, digits.target.astype(np.int64), test_size=0.3,
                                          random_state=seed, stratify=digits.target)
    return xtr, ytr, xte, yte
