"""The journal that makes an analysis resumable: its finished checkpoints, saved as they finish."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._internal.io import new_file
from ..provenance import collect
from .validate import rows_settings

__all__ = ["Journal"]


class Journal:
    """Finished checkpoints of an analysis, one JSON line each after a line with the settings
    and the provenance of the sessions that worked on it, this one's last.

    Parameters
    ----------
    path : path or None
        The journal file (``OUT.partial`` for a table written to ``OUT``); None keeps
        nothing on disk (an analysis without `out`), only this session's provenance.
    settings : dict
        The analysis settings; a journal of other settings is never resumed.
    """

    def __init__(self, path: str | os.PathLike | None, settings: Mapping[str, Any]) -> None:
        self.path = None if path is None else Path(path)
        self.settings: dict[str, Any] = json.loads(json.dumps(settings))
        self.sessions = [collect()]

    def read(self) -> list[tuple[int, list[dict[str, Any]]]]:
        """[(checkpoint, rows)] saved by an earlier run with the same settings; starts the
        journal if there is none."""
        if self.path is None:
            return []
        if os.path.islink(self.path) or (os.path.lexists(self.path) and not os.path.isfile(self.path)):
            kind = "a symbolic link" if os.path.islink(self.path) else "not a regular file"
            raise ValueError(f"{self.path} is {kind}, not an analysis journal; it is never read or written "
                             "through: remove it and rerun")
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with new_file(self.path) as fh:
                fh.write(json.dumps(self._head()) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return []
        lines = self.path.read_text().split("\n")
        try:
            head = json.loads(lines[0])
            saved = head["settings"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path} is not an analysis journal ({exc}); delete it to start again") from exc
        if not isinstance(saved, dict) or rows_settings(saved) != rows_settings(self.settings):
            saved = saved if isinstance(saved, dict) else {}
            diff = {k: (saved.get(k), v) for k, v in rows_settings(self.settings).items() if saved.get(k) != v}
            raise ValueError(f"{self.path} holds a partial analysis with other settings (saved, requested): {diff}; "
                             "delete it or choose another `out`")
        entries = []
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:  # the last line of a run killed while writing it
                break
            entries.append((entry["checkpoint"], entry["rows"]))
        # The earlier sessions' provenance is kept (settings alone decide whether to resume).
        earlier = head.get("provenance")
        self.sessions = (earlier if isinstance(earlier, list) else []) + self.sessions
        # Replace the journal by its intact lines, so that appends start on a fresh line.
        tmp = self.path.with_name(self.path.name + ".tmp")
        with new_file(tmp) as fh:
            fh.write("\n".join([json.dumps(self._head())] + lines[1:1 + len(entries)]) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        return entries

    def _head(self) -> dict[str, Any]:
        return {"settings": self.settings, "provenance": self.sessions}

    def finished_sessions(self) -> list[dict[str, Any]]:
        """The sessions' provenance, this (the last) one ended now."""
        return self.sessions[:-1] + [collect(self.sessions[-1]["started"], finished=True)]

    def append(self, checkpoint: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Save checkpoint `checkpoint`'s rows (nothing without a path)."""
        if self.path is None:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)  # the journal read() created or checked
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps({"checkpoint": checkpoint, "rows": list(rows)}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self) -> None:
        """Delete the journal (once the table is written)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
