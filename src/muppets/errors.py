"""Typed errors for user mistakes. ``assert`` is reserved for internal invariants.

Every error that concerns a file names the file and, where one exists, the line (or byte
position) and the offending value, so the user can go straight to it.
"""

from __future__ import annotations

from pathlib import Path


class MuppetsError(Exception):
    """Base class of every error muppets raises on purpose."""


class ConfigError(MuppetsError):
    """A configuration key or value is wrong (unknown key, wrong type, bad preset).

    ``key`` is the dotted path of the setting at fault (``train.lr``, ``tasks[2].weight``) where
    there is one, so a loader can point at the line of the config file that set it.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)

    def __reduce__(self):  # keep `key` through pickling (worker processes)
        return (_rebuild_config_error, (str(self), self.key))


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


class UnknownWordError(MuppetsError, KeyError):
    """A word looked up in static vectors is not in their vocabulary (a :class:`KeyError` too, as
    gensim's ``KeyedVectors`` raises); the message names the nearest spellings.

    >>> str(UnknownWordError("'King' is not among the 3 words", word="King"))
    "'King' is not among the 3 words"
    """

    def __init__(self, message: str, *, word: str = "") -> None:
        self.word = word
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (_rebuild_unknown_word, (str(self), self.word))


class CheckpointError(MuppetsError):
    """A checkpoint or model directory is missing, incomplete or incompatible."""


class CheckpointMismatch(CheckpointError):
    """A readable checkpoint whose tensors or parameter names do not fit the model being
    resumed: it was written for another architecture, task list or label set."""


class RunDirError(MuppetsError):
    """A run would overwrite what its run directory holds: an earlier run's checkpoints, files
    it did not write, or the record of the settings a finished run was trained with."""


class TrainingInterrupted(MuppetsError):
    """SIGINT/SIGTERM stopped a run that has no use half-done (a fine-tuning or feature run):
    its checkpoint is saved, and the same command resumes it."""


class TrainingDiverged(MuppetsError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


class LabelingFunctionError(MuppetsError):
    """A labeling function raised, or returned a value outside ``{ABSTAIN, 0..K-1}``; the
    message names the function, the example (index, id, ``file:line``) and the value.

    >>> str(LabelingFunctionError("returned 7", lf="kw_my", index=3, example_id="c9"))
    "labeling function 'kw_my' on example 3 (id 'c9'): returned 7"
    """

    def __init__(self, message: str, *, lf: str | None = None, index: int | None = None,
                 example_id: str | None = None, source: str | None = None,
                 value: object = None) -> None:
        self.message, self.lf, self.index = message, lf, index
        self.example_id, self.source, self.value = example_id, source, value
        where = f"labeling function {lf!r}" if lf is not None else "labeling function"
        if index is not None:
            where += f" on example {index}"
            details = [f"id {example_id!r}"] if example_id is not None else []
            details += [source] if source else []
            where += f" ({', '.join(details)})" if details else ""
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # survive the trip back from an applier's worker process
        return (_rebuild_lf_error, (self.message, self.lf, self.index, self.example_id,
                                    self.source, self.value))


def _rebuild_config_error(message: str, key: str | None) -> ConfigError:
    return ConfigError(message, key=key)


def _rebuild_unknown_word(message: str, word: str) -> UnknownWordError:
    return UnknownWordError(message, word=word)


def _rebuild_lf_error(message, lf, index, example_id, source, value) -> LabelingFunctionError:
    return LabelingFunctionError(message, lf=lf, index=index, example_id=example_id,
                                 source=source, value=value)
