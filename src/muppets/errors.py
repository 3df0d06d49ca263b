"""Typed errors for user mistakes. ``assert`` is reserved for internal invariants.

Every error that concerns a file names the file and, where one exists, the line (or byte
position) and the offending value, so the user can go straight to it.
"""

from __future__ import annotations

from pathlib import Path


class MuppetsError(Exception):
    """Base class of every error muppets raises on purpose."""


class ConfigError(MuppetsError):
    """A configuration key or value is wrong (unknown key, wrong type, bad preset)."""


class DataError(MuppetsError):
    """A data file is unreadable, empty, undecodable or malformed.

    >>> str(DataError("bad label", path="x.tsv", line=3, value="pos"))
    "x.tsv:3: bad label (value: 'pos')"
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        position: int | None = None,
        value: object = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.position = position
        self.value = value
        where = self.path or ""
        if line is not None:
            where += f":{line}"
        if position is not None:
            where += f" (byte {position})"
        text = f"{where}: {message}" if where else message
        if value is not None:
            text += f" (value: {value!r})"
        super().__init__(text)


class CheckpointError(MuppetsError):
    """A checkpoint or model directory is missing, incomplete or incompatible."""


class TrainingInterrupted(MuppetsError):
    """SIGINT/SIGTERM stopped a run that has no use half-done (a fine-tuning or feature run):
    its checkpoint is saved, and the same command resumes it."""


class TrainingDiverged(MuppetsError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""
