"""numpy arrays <-> pto tensors.

An array is *pto memory* when its ``.base`` chain ends at a ``_Memory`` (arrays from
``Worker.create_buffer``, ``pto.empty``, ``orch.alloc`` and a sub function's arguments, and
every view of them): a task names its bytes directly, with no copy. Any other array is
*foreign*: as an input it is copied into a new buffer of the Worker when the task is
submitted (later changes to the array are not seen); as an output it is refused, since
results could never reach it. Dtypes are never converted: a dtype pto does not hold is an
error.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _native
from .errors import SubmitError

#: Tags that write the tensor (a foreign array cannot take them).
WRITE_TAGS = ("output", "inout", "output_existing")

_DTYPES = (
    "float32", "float16", "bfloat16", "int32", "int16", "int8", "uint8", "int64", "uint64",
    "uint16", "uint32", "bool",
)


#: pto's short names (`DType::name`) for the numpy names.
_ALIASES = {
    "f32": "float32", "f16": "float16", "bf16": "bfloat16", "i32": "int32", "i16": "int16",
    "i8": "int8", "u8": "uint8", "i64": "int64", "u64": "uint64", "u16": "uint16",
    "u32": "uint32",
}


def dtype_name(dtype: Any, error: type = SubmitError) -> str:
    """The numpy name of a dtype pto holds (from a numpy dtype, its name or pto's short
    name); ``error`` (SubmitError by default) naming the dtype otherwise."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in _DTYPES:
        raise error(
            f"dtype {name}: pto holds {', '.join(_DTYPES)} (no conversion is made)"
        )
    return name


def array_of(memory: "_native._Memory") -> np.ndarray:
    """The numpy array over a ``_Memory`` (no copy)."""
    arr = np.asarray(memory)
    if memory.dtype == "bfloat16":
        try:
            import ml_dtypes  # type: ignore[import-not-found]

            arr = arr.view(ml_dtypes.bfloat16)
        except ImportError:
            pass  # the raw bits, as uint16
    return arr


def memory_of(arr: Any) -> Optional["_native._Memory"]:
    """The ``_Memory`` behind ``arr``, or None for a foreign array."""
    obj = arr
    while isinstance(obj, np.ndarray):
        obj = obj.base
    return obj if isinstance(obj, _native._Memory) else None


def _view(arr: np.ndarray, memory: "_native._Memory") -> Optional[Tuple[int, List[int], List[int]]]:
    """(byte offset, shape, element strides) of ``arr`` in its buffer, or None when the
    view cannot be a pto tensor (a zero or negative stride)."""
    item = arr.dtype.itemsize
    offset = arr.__array_interface__["data"][0] - memory.base_address
    shape = [int(n) for n in arr.shape] or [1]
    strides: List[int] = []
    for n, s in zip(arr.shape, arr.strides):
        if n == 1:
            strides.append(1)  # never stepped over: any positive stride names the same bytes
        elif s <= 0 or s % item:
            return None
        else:
            strides.append(s // item)
    return offset, shape, strides or [1]


def _check_array(arr: Any, index: int, tag: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise SubmitError(
            f"tensor {index} ({tag}): expected a numpy array, got {type(arr).__name__}"
        )
    return arr


def spec(worker: Any, index: int, tag: str, arr: Any) -> tuple:
    """The native spec of one tagged array for a task of ``worker``."""
    arr = _check_array(arr, index, tag)
    try:
        name = dtype_name(arr.dtype)
    except SubmitError as e:
        shape = "x".join(str(n) for n in arr.shape) or "scalar"
        raise SubmitError(
            f"tensor {index} ({tag}, a {shape} {arr.dtype.name} array): {e}; convert it first, "
            "e.g. arr.astype(np.float32)"
        ) from None
    memory = memory_of(arr)
    if memory is not None and memory.dtype == "bfloat16" and name == "uint16":
        name = "bfloat16"  # its bits seen as uint16 (no ml_dtypes): still a bfloat16 tensor
    if memory is not None and memory.owner_uid != worker._w.uid:
        memory, where = None, "memory of another Worker"
    else:
        where = "not pto memory" if memory is None else "a view with a zero or negative stride"
    view = _view(arr, memory) if memory is not None else None
    if view is None:
        if tag in WRITE_TAGS:
            raise SubmitError(
                f"tensor {index} ({tag}): the array is {where}; a task writes only into "
                "arrays from Worker.create_buffer, pto.empty or orch.alloc (an input would "
                "be copied in)"
            )
        copy = worker.create_buffer(arr.shape or (1,), name)
        copy[...] = arr.reshape(copy.shape)
        memory = memory_of(copy)
        assert memory is not None, "create_buffer returns pto memory"
        view = _view(copy, memory)
    offset, shape, strides = view  # type: ignore[misc]
    return (tag, memory, offset, shape, strides, name)


def scalar_bits(value: Any, dtype: Optional[str] = None) -> int:
    """A scalar argument as the 64 bits a kernel reads.

    ints are two's complement 64-bit; Python floats are float32 unless ``dtype`` says
    ``float64``; numpy scalars keep their own type.
    """
    if isinstance(value, (bool, np.bool_)):
        raise SubmitError("scalar: a bool is not a scalar argument (pass 0 or 1)")
    if isinstance(value, np.generic) and dtype is None:
        dtype = value.dtype.name
    if dtype is None:
        dtype = "int64" if isinstance(value, (int, np.integer)) else "float32"
    kinds = {
        "float32": "<f4", "float64": "<f8", "int64": "<i8", "uint64": "<u8",
        "int32": "<i4", "uint32": "<u4", "int16": "<i2", "uint16": "<u2",
        "int8": "<i1", "uint8": "<u1",
    }
    if dtype not in kinds:
        raise SubmitError(f"scalar: dtype {dtype}: expected one of {', '.join(kinds)}")
    try:
        raw = np.array(value, dtype=kinds[dtype]).tobytes()
        if dtype in ("float32", "float64") and not isinstance(value, (float, int, np.number)):
            raise TypeError
        if dtype not in ("float32", "float64") and int(value) != value:
            raise ValueError
        if dtype not in ("float32", "float64") and not (
            np.iinfo(kinds[dtype]).min <= int(value) <= np.iinfo(kinds[dtype]).max
        ):
            raise OverflowError
    except (TypeError, ValueError, OverflowError):
        raise SubmitError(f"scalar: {value!r} does not fit {dtype}") from None
    # Narrow types are zero-extended, as the Rust builder does (`i32 as u32 as u64`).
    raw = raw.ljust(8, b"\0")
    return int.from_bytes(raw, "little")


def specs(worker: Any, tensors: Sequence[Tuple[str, Any]]) -> List[tuple]:
    return [spec(worker, i, tag, arr) for i, (tag, arr) in enumerate(tensors)]


def dims(shape: Any, what: str, error: type) -> List[int]:
    """A shape as a list of dimensions in 0..2^32, or ``error`` naming ``what``."""
    try:
        raw = [shape] if isinstance(shape, (int, np.integer)) else list(shape)
    except TypeError:
        raise error(f"{what}: shape {shape!r}: expected an int or a sequence of ints") from None
    out = []
    for n in raw:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise error(f"{what}: shape {tuple(raw)}: dimensions must be integers")
        if not 0 <= int(n) < 1 << 32:
            raise error(f"{what}: shape {tuple(raw)}: a dimension must be in 0..2^32, got {int(n)}")
        out.append(int(n))
    return out


def index(value: Any, what: str, error: type, **attrs: Any) -> int:
    """A non-negative int (a count, an index), or ``error`` naming ``what`` and the value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise error(f"{what} = {value!r}: expected an integer >= 0", **attrs)
    return int(value)
