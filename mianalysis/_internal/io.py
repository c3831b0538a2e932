"""Small file and terminal helpers shared by the package: CSV rows, JSON records, new files
and progress bars."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def write_rows(rows, path, fieldnames=None):
    """Write a list of dicts with the same keys as CSV to `path`, through a new temporary
    file (``PATH.tmp``) renamed into place: a file or a symbolic link at `path` is replaced
    itself, never written through, and an interrupted write leaves `path` as it was.
    `fieldnames` (default: the first row's keys) are the columns, in order."""
    import csv

    if not rows:
        raise ValueError(f"nothing to write to {path}")
    with replaced(path) as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if fieldnames is None else list(fieldnames))
        writer.writeheader()
        writer.writerows(rows)


def write_json(path: str | os.PathLike, record: Any) -> None:
    """Write `record` as indented JSON (and a final newline) to `path`, as :func:`write_rows`
    writes a table: through a new temporary file renamed into place. Values JSON does not
    know (a path, a NumPy number) are written as their text."""
    import json

    with replaced(path) as fh:
        fh.write(json.dumps(record, indent=1, default=str) + "\n")


@contextmanager
def replaced(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """A new file ``PATH.tmp`` (:func:`new_file`) to write, renamed onto `path` when the block
    ends without an error and removed when it raises: `path` is either as it was or the
    complete new file, and a file or link at `path` is replaced, never written through."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with new_file(tmp, mode) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp) and not os.path.isdir(tmp):
            tmp.unlink()
        raise


def new_file(path, mode="w"):
    """`path` opened as a new regular file for writing text (`mode` "w") or bytes ("wb"): a
    leftover file there (or a symbolic link planted in its place) is removed first, never
    written through."""
    path = Path(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, mode) if "b" in mode else os.fdopen(fd, mode, newline="")


def progress_bar(total, *, initial=0, unit="it", desc=None, enabled=True):
    """A tqdm progress bar, or an object with the same `update` and `close` that draws
    nothing when `enabled` is false (tqdm is not imported then)."""
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit=unit, desc=desc)


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass
