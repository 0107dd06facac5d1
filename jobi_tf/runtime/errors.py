"""Exceptions raised for expected failures.

Every message is one line that says *where* (file:line, flag or signature), *what* went
wrong and, when it helps, what to do. The CLI turns any `JobiError` into a one-line
`Error: ...` and exit code 1; the library never calls `sys.exit`.
"""

from __future__ import annotations

__all__ = [
    "JobiError",
    "DatasetFormatError",
    "ConfigError",
    "CheckpointMismatchError",
    "DamagedFileError",
    "GridSpecError",
    "ExportError",
    "TrainingStopped",
]


class JobiError(Exception):
    """Base class of every error the user can cause and fix."""


class DatasetFormatError(JobiError):
    """A dataset file is missing, empty or malformed.

    Args:
        path: the file (or folder) at fault.
        line: 1-based line number, or None when the problem is the whole file.
        message: what is wrong there.
    """

    def __init__(self, path: object, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


class ConfigError(JobiError):
    """A configuration field (and so the CLI flag of the same name) has a bad value.

    The message names the flag (``--batch-size: ...``), what a CLI user typed; from Python
    (`jobi_tf.train` and friends) `for_python` names the field (``batch_size: ...``).
    """

    def __init__(self, field: str, message: str, *, as_flag: bool = True) -> None:
        self.field = field
        self.detail = message
        name = "--" + field.replace("_", "-") if as_flag else field
        super().__init__(f"{name}: {message}")

    def for_python(self) -> ConfigError:
        """The same error, naming the config field instead of the flag."""
        return ConfigError(self.field, self.detail, as_flag=False)


class CheckpointMismatchError(JobiError):
    """A run folder holds a run whose configuration differs from the requested one."""


class DamagedFileError(JobiError):
    """A saved file (checkpoint, weights) does not read back as it was written: truncated,
    overwritten, empty, or its bytes differ from the SHA-256 written beside it.

    Args:
        path: the file.
        reason: what is wrong with it, e.g. ``File is not a zip file``.
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: damaged ({reason})")


class GridSpecError(JobiError):
    """A grid spec file (``jobi-tf grid SPEC``) is malformed or asks for an invalid cell."""


class ExportError(JobiError):
    """A SavedModel cannot be written (NaN weights, an existing version) or read (not an export)."""


class TrainingStopped(JobiError):
    """Training stopped before its end: a signal (checkpoint written) or a NaN/Inf loss.

    ``exit_code`` is what the CLI exits with: 128 + the signal's number (130 for SIGINT,
    143 for SIGTERM), as shells report a process killed by that signal; 1 for a NaN.
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
