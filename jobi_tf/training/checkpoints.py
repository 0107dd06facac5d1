"""Atomic, resumable checkpoints of a run: model weights, optimizer slots and loop state.

A checkpoint is one ``.npz`` file written to ``<name>.tmp`` and renamed into place, so a
run killed while writing leaves the previous checkpoint intact, never half a file. A write
that fails (disk full, read-only folder) or meets a NaN/Inf weight removes the temporary
file and raises a one-line `JobiError`; the previous checkpoint stays. Arrays
are stored by variable path, so a checkpoint from a different model is refused with a
`CheckpointMismatchError` instead of loading garbage.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.runtime.atomic import replacing
from jobi_tf.runtime.errors import CheckpointMismatchError, JobiError

__all__ = ["save_checkpoint", "load_checkpoint", "save_weights", "load_weights"]


#: Rows of a variable converted to NumPy at a time while it is written.
_ROWS_PER_BLOCK = 1 << 16


def _write_npz(path: Path, arrays: dict[str, object]) -> None:
    """An ``.npz`` (byte for byte what ``np.savez`` writes) of variables and arrays, atomically.

    Variables are written a block of rows at a time: saving a 2M-row table and its two Adam
    moments then needs a few MB of extra memory, not a copy of each.
    """
    try:
        with replacing(path, fsync=True) as tmp, open(tmp, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
                for name, value in arrays.items():
                    with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                        _write_npy(member, value, name)
    except _NonFinite as exc:
        raise JobiError(f"{path}: {exc}; the previous version is kept") from None


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


def save_checkpoint(path: str | os.PathLike[str], model: keras.Model, optimizer, state: dict) -> None:
    """Weights, optimizer variables and a JSON-able ``state`` dict, atomically."""
    arrays: dict[str, object] = dict(_variables(model, optimizer))
    arrays["__state__"] = np.frombuffer(json.dumps(state).encode("utf-8"), dtype=np.uint8)
    _write_npz(Path(path), arrays)


def load_checkpoint(path: str | os.PathLike[str], model: keras.Model, optimizer) -> dict:
    """Restore what `save_checkpoint` wrote; returns its ``state``.

    The optimizer must already be built (``optimizer.build(model.trainable_variables)``).
    Every shape is checked before any variable changes.
    """
    with np.load(path) as data:
        stored = set(data.files) - {"__state__"}
        targets = _variables(model, optimizer)
        if stored != set(targets):
            missing = sorted(set(targets) ^ stored)[:3]
            raise CheckpointMismatchError(f"{path}: checkpoint does not match this model (e.g. {missing})")
        state = json.loads(data["__state__"].tobytes().decode("utf-8"))
    _assign_all(Path(path), targets)
    return state


def save_weights(path: str | os.PathLike[str], model: keras.Model) -> None:
    """Model weights only (the best-on-validation copy), atomically."""
    _write_npz(Path(path), _variables(model, None))


def load_weights(path: str | os.PathLike[str], model: keras.Model) -> None:
    """Restore what `save_weights` wrote."""
    targets = _variables(model, None)
    with np.load(path) as data:
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
