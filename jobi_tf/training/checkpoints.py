"""Atomic, resumable checkpoints of a run: model weights, optimizer slots and loop state.

A checkpoint is one ``.npz`` file written to ``<name>.tmp`` and renamed into place, so a
run killed while writing leaves the previous checkpoint intact, never half a file. A write
that fails (disk full, read-only folder) or meets a NaN/Inf weight removes the temporary
file and raises a one-line `JobiError`; the previous checkpoint stays. Arrays
are stored by variable path, so a checkpoint from a different model is refused with a
`CheckpointMismatchError` instead of loading garbage.

Each ``.npz`` gets its SHA-256 in ``<name>.sha256`` beside it, written after the file is in
place, and a run's checkpoint before the last is kept (`save_run_checkpoint`). Why: a file
damaged after it was written (a crash mid-copy, a disk that filled while copying, bytes
overwritten) must be found before it is loaded, and the run then goes on from the one before
(`jobi_tf.training.resume`). A file without its ``.sha256`` (a kill between the rename and the
digest, a run older than the digests) is checked by the CRC-32 of every member instead.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.config.runs import RunFolder
from jobi_tf.runtime.atomic import replacing
from jobi_tf.runtime.digests import read_sha256sums, sha256_file, write_sha256sums
from jobi_tf.runtime.errors import CheckpointMismatchError, DamagedFileError, JobiError

__all__ = [
    "save_checkpoint",
    "save_run_checkpoint",
    "load_checkpoint",
    "save_weights",
    "load_weights",
    "read_state",
    "verify",
    "checksum_path",
]


#: Rows of a variable converted to NumPy at a time while it is written.
_ROWS_PER_BLOCK = 1 << 16


def checksum_path(path: str | os.PathLike[str]) -> Path:
    """Where the SHA-256 of the ``.npz`` at ``path`` is kept."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def _write_npz(path: Path, arrays: dict[str, object], previous: Path | None = None) -> None:
    """An ``.npz`` (byte for byte what ``np.savez`` writes) of variables and arrays, atomically,
    with its SHA-256 beside it; the file it replaces becomes ``previous`` when one is given.

    Variables are written a block of rows at a time: saving a 2M-row table and its two Adam
    moments then needs a few MB of extra memory, not a copy of each. The order of the renames
    leaves, at any kill, a readable newest file (``path``, else ``previous``) whose digest file
    is its own or absent.
    """
    try:
        with replacing(path) as tmp:
            with open(tmp, "wb") as f:
                with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
                    for name, value in arrays.items():
                        with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                            _write_npy(member, value, name)
                f.flush()
                os.fsync(f.fileno())  # before anything is renamed: a failure here changes nothing
            digest = sha256_file(tmp)
            _retire(path, previous)
    except _NonFinite as exc:
        raise JobiError(f"{path}: {exc}; the previous version is kept") from None
    _write_digest(path, digest)


def _write_digest(path: Path, digest: str) -> None:
    write_sha256sums(checksum_path(path), {path.name: digest})


def _retire(path: Path, previous: Path | None) -> None:
    """Move ``path`` and its digest to ``previous`` (the digest first), or drop ``path``'s
    digest, which would call the new file damaged."""
    if previous is None or not path.exists():
        checksum_path(path).unlink(missing_ok=True)
        return
    digest = _recorded_digest(path)
    if digest is not None:
        _write_digest(previous, digest)
    else:
        checksum_path(previous).unlink(missing_ok=True)
    checksum_path(path).unlink(missing_ok=True)
    os.replace(path, previous)


def verify(path: str | os.PathLike[str]) -> None:
    """Raise `DamagedFileError` unless the ``.npz`` at ``path`` reads back as it was written.

    Checked against ``<path>.sha256`` when that holds a digest, else by the CRC-32 of every member.
    """
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise DamagedFileError(path, "0 bytes")
        expected = _recorded_digest(path)
        if expected is not None and sha256_file(path) == expected:
            return
        with zipfile.ZipFile(path) as archive:  # no digest, or a wrong one: the zip says what is wrong
            bad = archive.testzip()
        if bad is not None:
            raise DamagedFileError(path, f"bad CRC-32 of {bad}")
        if expected is not None:
            raise DamagedFileError(path, f"its SHA-256 is not the one in {checksum_path(path).name}")
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise DamagedFileError(path, str(exc) or type(exc).__name__) from None
    except OSError as exc:
        raise DamagedFileError(path, f"unreadable: {exc.strerror or exc}") from None


def _recorded_digest(path: Path) -> str | None:
    """The digest in ``path``'s ``.sha256`` file, or None when there is none (or it is not one)."""
    return read_sha256sums(checksum_path(path)).get(path.name)


def _opened(path: Path):
    """``np.load(path)`` after `verify`; a read that fails anyway is a `DamagedFileError` too."""
    verify(path)
    try:
        return np.load(path)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        raise DamagedFileError(path, str(exc) or type(exc).__name__) from None


class _NonFinite(Exception):
    """A variable holds NaN or Inf: it must never reach a checkpoint."""


def _finite(array: np.ndarray, name: str) -> np.ndarray:
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise _NonFinite(f"{name} holds NaN or Inf, not written")
    return array


def _write_npy(f, value, name: str = "array") -> None:
    if not hasattr(value, "numpy") or len(value.shape) == 0 or value.shape[0] <= _ROWS_PER_BLOCK:
        array = _finite(np.asarray(value.numpy() if hasattr(value, "numpy") else value), name)
        np.lib.format.write_array(f, array, allow_pickle=False)
        return
    block = _finite(np.ascontiguousarray(value[:_ROWS_PER_BLOCK].numpy()), name)
    header = {"descr": np.lib.format.dtype_to_descr(block.dtype), "fortran_order": False, "shape": tuple(value.shape)}
    np.lib.format.write_array_header_1_0(f, header)
    f.write(block.tobytes())
    for lo in range(_ROWS_PER_BLOCK, value.shape[0], _ROWS_PER_BLOCK):
        f.write(_finite(np.ascontiguousarray(value[lo : lo + _ROWS_PER_BLOCK].numpy()), name).tobytes())


def _variables(model: keras.Model, optimizer) -> dict[str, object]:
    """Checkpoint name → variable (or `jobi_tf.models.sharding.ShardedTable`, written a block at a time).

    A sharded table is stored under the path the same table has as a Keras weight, so the
    weights of a parameter-server run load into an unsharded model.
    """
    out = {f"model/{v.path}": v for v in model.weights}
    out.update({f"model/{table.path}": table for table in getattr(model, "sharded_tables", [])})
    if isinstance(optimizer, keras.optimizers.Optimizer):
        # Slot names embed the model's name; their order is fixed by the model's weights.
        out.update({f"optimizer/{i:04d}": v for i, v in enumerate(optimizer.variables)})
    elif optimizer is not None:  # a jobi_tf.models.sharding optimizer: slots by table path
        out.update({f"optimizer/{name}": v for name, v in optimizer.variables().items()})
    return out


def _state_array(state: dict) -> np.ndarray:
    return np.frombuffer(json.dumps(state).encode("utf-8"), dtype=np.uint8)


def save_checkpoint(
    path: str | os.PathLike[str], model: keras.Model, optimizer, state: dict, *, previous: Path | None = None
) -> None:
    """Weights, optimizer variables and a JSON-able ``state`` dict, atomically; the file it
    replaces is kept as ``previous`` when one is given."""
    arrays: dict[str, object] = dict(_variables(model, optimizer))
    arrays["__state__"] = _state_array(state)
    _write_npz(Path(path), arrays, previous)


def save_run_checkpoint(run_dir: str | os.PathLike[str], model: keras.Model, state: dict) -> None:
    """The run's resumable checkpoint (with ``model.optimizer``); the last one before it is kept."""
    folder = RunFolder(run_dir)
    save_checkpoint(folder.checkpoint, model, model.optimizer, state, previous=folder.previous_checkpoint)


def load_checkpoint(path: str | os.PathLike[str], model: keras.Model, optimizer) -> dict:
    """Restore what `save_checkpoint` wrote; returns its ``state``.

    The optimizer must already be built (``optimizer.build(model.trainable_variables)``).
    The file is verified and every shape checked before any variable changes; a damaged file
    is a `DamagedFileError`.
    """
    path = Path(path)
    with _opened(path) as data:
        stored = set(data.files) - {"__state__"}
        targets = _variables(model, optimizer)
        if stored != set(targets):
            missing = sorted(set(targets) ^ stored)[:3]
            raise CheckpointMismatchError(f"{path}: checkpoint does not match this model (e.g. {missing})")
        state = _read_state_member(path, data)
    _assign_all(path, targets)
    return state


def read_state(path: str | os.PathLike[str]) -> dict | None:
    """The ``state`` a checkpoint (or best weights) was saved with, without loading any weight;
    None when the file has none. A damaged file is a `DamagedFileError`."""
    path = Path(path)
    with _opened(path) as data:
        return _read_state_member(path, data) if "__state__" in data.files else None


def _read_state_member(path: Path, data) -> dict:
    try:
        return json.loads(data["__state__"].tobytes().decode("utf-8"))
    except (KeyError, ValueError) as exc:
        raise DamagedFileError(path, f"no readable loop state ({exc})") from None


def save_weights(path: str | os.PathLike[str], model: keras.Model, state: dict | None = None) -> None:
    """Model weights only (the best-on-validation copy), atomically.

    ``state``: the loop state these weights were reached at, so a run whose checkpoints are
    all damaged can start again from them (`jobi_tf.training.resume`).
    """
    arrays: dict[str, object] = dict(_variables(model, None))
    if state is not None:
        arrays["__state__"] = _state_array(state)
    _write_npz(Path(path), arrays)


def load_weights(path: str | os.PathLike[str], model: keras.Model) -> None:
    """Restore what `save_weights` wrote; a damaged file is a `DamagedFileError` and changes nothing."""
    targets = _variables(model, None)
    with _opened(Path(path)) as data:
        for key in targets:
            if key not in data.files:
                raise CheckpointMismatchError(f"{path}: no {key} in the saved weights")
    _assign_all(Path(path), targets)


def _assign_all(path: Path, targets: dict[str, object]) -> None:
    """Assign each ``name.npy`` member of the ``.npz`` at ``path`` to its variable, a block of rows at a time.

    Why not ``var.assign(np.load(path)[name])``: for a 2M-row table that holds the NumPy
    array, its tensor copy and the variable's old buffer at once (4.5 GB for a 1.5 GB
    table), which set the peak memory of a large run's last phase. Every shape is checked
    first, so a mismatch changes nothing.
    """
    with zipfile.ZipFile(path) as archive:
        for key, var in targets.items():
            with archive.open(f"{key}.npy") as member:
                shape, _ = _read_npy_header(member, path, key)
            if tuple(shape) != tuple(var.shape):
                raise CheckpointMismatchError(
                    f"{path}: {key} has shape {shape} in the checkpoint, {tuple(var.shape)} in the model"
                )
        for key, var in targets.items():
            with archive.open(f"{key}.npy") as member:
                shape, dtype = _read_npy_header(member, path, key)
                write_rows = _row_writer(var)
                if len(shape) == 0 or shape[0] <= _ROWS_PER_BLOCK or write_rows is None:
                    var.assign(np.frombuffer(member.read(), dtype=dtype).reshape(shape))
                    continue
                row_bytes = dtype.itemsize * int(np.prod(shape[1:]))
                for lo in range(0, shape[0], _ROWS_PER_BLOCK):
                    rows = min(_ROWS_PER_BLOCK, shape[0] - lo)
                    write_rows(
                        lo, np.frombuffer(member.read(rows * row_bytes), dtype=dtype).reshape((rows, *shape[1:]))
                    )


def _row_writer(var):
    """``(lo, block) -> None`` writing rows in place, or None when ``var`` takes whole assigns only."""
    if hasattr(var, "assign_rows"):  # a ShardedTable: each block goes to the server holding its rows
        return lambda lo, block: var.assign_rows(lo, block.astype(np.float32, copy=False))
    backing = getattr(var, "value", var)
    if not isinstance(backing, tf.Variable) or isinstance(backing, tf.distribute.DistributedValues):
        return None

    def write(lo: int, block: np.ndarray) -> None:
        # In place: a sliced assign into the backing variable's own buffer.
        backing[lo : lo + len(block)].assign(block.astype(backing.dtype.as_numpy_dtype, copy=False))

    return write


def _read_npy_header(member, path: Path, key: str) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(member)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read(member)
    if fortran_order or dtype.hasobject:
        raise CheckpointMismatchError(f"{path}: {key} is not a plain C-ordered array")
    return shape, dtype
