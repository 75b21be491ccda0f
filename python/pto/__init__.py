"""pto: Parallel Task Orchestration, driven from Python.

A level-3 :class:`Worker` owns simulated chips (child processes by default, or threads) and
sub workers (threads of this process, running Python functions). An orchestration function
builds each run's task graph; dependencies follow from how tasks read and write arrays, and
every chip task carries its own ring sizing in its :class:`CallConfig`::

    import numpy as np, pto

    with pto.Worker(level=3, chips=2) as w:
        add = w.register(pto.ChipCallable("elementwise_add"))
        w.init()
        a, b, out = (w.create_buffer((1024,), "float32") for _ in range(3))
        a[:], b[:] = 1.0, 2.0

        def orch_fn(orch, args, cfg):
            small = cfg.derive(runtime_env=pto.RuntimeEnv(ring_heap=1 << 20))
            orch.submit_next_level(add, pto.TaskArgs().input(a).input(b)
                                   .output_existing(out).label("small"), small, worker=0)

        report = w.run(orch_fn, pto.TaskArgs(), pto.CallConfig())
        print(report.task("small").sizing)   # task_window=16384d,… heap=1Mc,1Mc,1Mc,1Mc …
        assert (out == 3.0).all()
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native, _tensors
from ._native import (
    CallableHandle,
    CallConfig,
    ChipReport,
    MemberReport,
    Resolution,
    Resolved,
    RingUsage,
    RunReport,
    RuntimeEnv,
    Sizing,
    TaskReport,
    error_codes,
)
from .errors import ConfigError, PtoError, RunError, SubmitError, WorkerError

__all__ = [
    "Worker", "ChipCallable", "SubCallable", "TaskArgs", "SubArgs", "Orchestrator",
    "CallConfig", "RuntimeEnv", "CallableHandle", "RunReport", "TaskReport", "MemberReport",
    "ChipReport", "Sizing", "Resolved", "RingUsage", "Resolution", "resolve", "empty",
    "error_codes", "chip_callables", "PtoError", "ConfigError", "WorkerError", "SubmitError",
    "RunError",
]

# A Worker's child process is this interpreter again, loading this very native module by its
# path (not the package: a chip needs no numpy) and serving its chip (`_child_main` never
# returns in a child).
_NATIVE = os.path.abspath(_native.__file__)
_native._set_child_command(
    sys.executable,
    [
        "-c",
        "import importlib.machinery as m, importlib.util as u; "
        f"s = u.spec_from_loader('pto._native', m.ExtensionFileLoader('pto._native', {_NATIVE!r})); "
        "n = u.module_from_spec(s); s.loader.exec_module(n); n._child_main()",
    ],
)


def chip_callables() -> List[str]:
    """The chip callables built into this module (names for :class:`ChipCallable`)."""
    return list(_native.chip_callables())


class ChipCallable:
    """A chip callable (an L2 orchestration built into the module), by name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"ChipCallable({self.name!r})"


class SubCallable:
    """A Python function run as a sub task: ``fn(args: SubArgs)``; ``name`` defaults to the
    function's name."""

    def __init__(self, fn: Callable[["SubArgs"], Any], name: Optional[str] = None) -> None:
        if not callable(fn):
            raise WorkerError(f"a sub callable must be callable, got {type(fn).__name__}")
        self.fn = fn
        raw = name or getattr(fn, "__name__", "") or "sub"
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw)


class TaskArgs:
    """A task's arguments: tagged arrays, scalars and a label. Each method adds to these
    arguments and returns them, so calls chain:
    ``TaskArgs().input(a).output_existing(b).scalar(3).label("attn")``.

    Arrays from ``Worker.create_buffer`` / :func:`empty` / ``orch.alloc`` (and views of
    them) are used in place. Any other array is copied when the task is submitted, and only
    as an input; writing tags need pto memory.
    """

    def __init__(self) -> None:
        self._tensors: List[Tuple[str, np.ndarray]] = []
        self._scalars: List[int] = []
        self._label: Optional[str] = None

    def _add(self, tag: str, arr: np.ndarray) -> "TaskArgs":
        self._tensors.append((tag, arr))
        return self

    def input(self, arr: np.ndarray) -> "TaskArgs":
        """Read: the task waits for the array's earlier writers."""
        return self._add("input", arr)

    def tracked_input(self, arr: np.ndarray) -> "TaskArgs":
        """Read, and tracked as a read: a later task that writes the array waits for this one
        (write-after-read), whether or not ``track_war`` is on."""
        return self._add("tracked_input", arr)

    def output(self, arr: np.ndarray) -> "TaskArgs":
        """Written; later readers wait for this task."""
        return self._add("output", arr)

    def inout(self, arr: np.ndarray) -> "TaskArgs":
        """Read and written."""
        return self._add("inout", arr)

    def output_existing(self, arr: np.ndarray) -> "TaskArgs":
        """Written into an existing buffer; later readers wait for this task."""
        return self._add("output_existing", arr)

    def no_dep(self, arr: np.ndarray) -> "TaskArgs":
        """Passed without dependency tracking."""
        return self._add("no_dep", arr)

    def scalar(self, value: Union[int, float, np.generic], dtype: Optional[str] = None) -> "TaskArgs":
        """A scalar: ints as 64-bit two's complement, Python floats as float32 (``dtype``
        says otherwise, e.g. ``"float64"``), numpy scalars as their own type."""
        self._scalars.append(_tensors.scalar_bits(value, dtype))
        return self

    def label(self, name: str) -> "TaskArgs":
        """The task's label (reports, ``report.task(label)``)."""
        self._label = name
        return self

    @property
    def tensors(self) -> List[np.ndarray]:
        return [arr for _, arr in self._tensors]

    @property
    def scalars(self) -> List[int]:
        return list(self._scalars)

    def _spec(self, worker: "Worker") -> tuple:
        return (_tensors.specs(worker, self._tensors), list(self._scalars), self._label)

    def __repr__(self) -> str:
        tags = ", ".join(f"{t}{tuple(a.shape)}" for t, a in self._tensors)
        return f"TaskArgs([{tags}], scalars={self._scalars}, label={self._label!r})"


class SubArgs:
    """What a Python sub function receives: its arrays (over the task's buffers, no copy),
    its scalars (64-bit patterns; :meth:`scalar` reads them as a type), and where it runs."""

    def __init__(
        self, tensors: List[np.ndarray], scalars: List[int], context: Dict[str, Any],
        dtypes: Optional[List[str]] = None,
    ):
        self.tensors = tensors
        self.scalars = scalars
        #: pto's dtype of each tensor (``bfloat16`` tensors arrive as uint16 bit patterns
        #: unless ml_dtypes is installed).
        self.dtypes: List[str] = dtypes if dtypes is not None else [t.dtype.name for t in tensors]
        self.label: Optional[str] = context.get("label")
        self.task: int = context.get("task", 0)
        self.worker: int = context.get("worker", 0)
        self.member: Tuple[int, int] = tuple(context.get("member", (0, 1)))  # type: ignore[assignment]

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tensors[i]

    def tensor(self, i: int) -> np.ndarray:
        """Tensor ``i`` (as ``args[i]``)."""
        return self.tensors[i]

    def __len__(self) -> int:
        return len(self.tensors)

    def scalar(self, j: int, dtype: str = "int64") -> Union[int, float]:
        """Scalar ``j`` read as ``dtype`` (``int64``, ``uint64``, ``float32``, ``float64``…)."""
        raw = int(self.scalars[j]).to_bytes(8, "little")
        value = np.frombuffer(raw[: np.dtype(dtype).itemsize], dtype=np.dtype(dtype).newbyteorder("<"))[0]
        return value.item()


class Orchestrator:
    """The handle an orchestration function receives on its run; valid only while it runs."""

    def __init__(self, native: Any, worker: "Worker", config: CallConfig) -> None:
        self._o = native
        self._worker = worker
        self._config = config

    def submit_next_level(
        self,
        handle: CallableHandle,
        args: TaskArgs,
        cfg: Optional[CallConfig] = None,
        worker: int = 0,
    ) -> int:
        """One chip job on chip ``worker`` with its own config ``cfg`` (default: the run's);
        returns the task's index in the run."""
        worker = _tensors.index(worker, "worker", SubmitError)
        return self._o.submit_next_level(
            handle, args._spec(self._worker), cfg or self._config, worker
        )

    def submit_next_level_group(
        self,
        handle: CallableHandle,
        args_list: Sequence[TaskArgs],
        cfg: Optional[CallConfig] = None,
        workers: Sequence[int] = (),
    ) -> int:
        """One task whose member i runs ``args_list[i]`` on chip ``workers[i]``, together."""
        chips = [_tensors.index(w, "workers[]", SubmitError) for w in workers]
        specs = [a._spec(self._worker) for a in args_list]
        return self._o.submit_next_level_group(handle, specs, cfg or self._config, chips)

    def submit_sub(self, handle: CallableHandle, args: Optional[TaskArgs] = None) -> int:
        """A sub task (a registered Python function) on any idle sub worker."""
        if self._o.sub_workers == 0:
            raise SubmitError("submit_sub: this Worker has no sub workers (Worker(sub_workers=N))")
        return self._o.submit_sub(handle, (args or TaskArgs())._spec(self._worker))

    def submit_sub_group(self, handle: CallableHandle, args_list: Sequence[TaskArgs]) -> int:
        """``len(args_list)`` sub tasks on as many sub workers, started together."""
        return self._o.submit_sub_group(handle, [a._spec(self._worker) for a in args_list])

    @contextlib.contextmanager
    def scope(self) -> Iterator["Orchestrator"]:
        """A nested scope: ``with orch.scope(): ...``; its references end with the block."""
        self._o.enter_scope()
        try:
            yield self
        finally:
            self._o.exit_scope()

    def alloc(self, shape: Union[int, Sequence[int]], dtype: Any = "float32") -> np.ndarray:
        """A row-major intermediate from the heap ring of the current scope depth, reclaimed
        when its scope ended and no task uses it. Tasks pass it between them; tag it
        ``inout``/``output_existing`` in the task that writes it."""
        dims = _tensors.dims(shape, "alloc", SubmitError)
        return _tensors.array_of(self._o.alloc(dims, _tensors.dtype_name(dtype)))

    @property
    def depth(self) -> int:
        """The current scope depth (0 = the run's outer scope)."""
        return self._o.depth

    @property
    def submitted_tasks(self) -> int:
        return self._o.submitted_tasks

    @property
    def next_level_workers(self) -> int:
        return self._o.next_level_workers

    @property
    def sub_workers(self) -> int:
        return self._o.sub_workers

    @property
    def run_id(self) -> int:
        return self._o.run_id


_live_workers: "weakref.WeakSet[Worker]" = weakref.WeakSet()


class Worker:
    """A level-3 Worker: ``chips`` simulated chips and ``sub_workers`` sub workers.

    ``mode="child-process"`` (default) runs each chip in a child process (this interpreter
    again) with buffers in shared memory; ``"in-process"`` runs them as threads. Sub workers
    are always threads of this process, so Python sub functions see this process's state.
    The reference system's spellings are accepted too: ``device_ids=[0, 1]`` (as many chips)
    and ``num_sub_workers``.

    Options: ``heap_ring_size`` (bytes of the L3 heap behind ``orch.alloc``),
    ``task_timeout`` (seconds; a task running longer fails), ``env`` (``PTO2_RING_*`` values
    for the chips, on top of the process environment, which is never changed),
    ``strict_env`` (environment problems fail ``init``), ``lane_depth``, ``track_war``.

    Dependencies: a task that reads an array (``input``, ``inout``) waits for the earlier
    tasks that write overlapping bytes. Writers (``output``, ``output_existing``) do not wait
    for earlier readers unless ``track_war=True``, and two such writers of the same bytes are
    not ordered: make the later one ``inout`` when it must follow.
    """

    def __init__(
        self,
        level: int = 3,
        chips: Optional[int] = None,
        sub_workers: Optional[int] = None,
        mode: str = "child-process",
        *,
        device_ids: Optional[Sequence[int]] = None,
        num_sub_workers: Optional[int] = None,
        heap_ring_size: Optional[int] = None,
        task_timeout: Optional[float] = None,
        env: Optional[Dict[str, str]] = None,
        strict_env: bool = False,
        lane_depth: Optional[int] = None,
        track_war: bool = False,
    ) -> None:
        for option, value in (("level", level), ("chips", chips), ("sub_workers", sub_workers),
                              ("num_sub_workers", num_sub_workers),
                              ("heap_ring_size", heap_ring_size), ("lane_depth", lane_depth)):
            if value is not None:
                _tensors.index(value, option, WorkerError, option=option)
        if chips is None:
            chips = len(device_ids) if device_ids is not None else 1
        elif device_ids is not None and len(device_ids) != chips:
            raise WorkerError(
                f"chips={chips} but device_ids has {len(device_ids)} entries", option="chips"
            )
        if sub_workers is None:
            sub_workers = num_sub_workers or 0
        self._w = _native._Worker(
            level, chips, sub_workers, mode, heap_ring_size, task_timeout,
            dict(env) if env else None, strict_env, lane_depth, track_war,
        )
        self._callables: Dict[str, CallableHandle] = {}

    # -- lifecycle ----------------------------------------------------------------------

    def register(self, callable_: Union[ChipCallable, SubCallable, Callable[..., Any]]) -> CallableHandle:
        """Registers a :class:`ChipCallable`, or a Python function (a :class:`SubCallable`)
        for sub tasks (before or after :meth:`init`). Returns the handle tasks name it by."""
        if isinstance(callable_, ChipCallable):
            handle = self._w.register_chip(callable_.name)
        else:
            sub = callable_ if isinstance(callable_, SubCallable) else SubCallable(callable_)
            handle = self._w.register_sub(sub.name, _sub_adapter(sub.fn))
        self._callables[handle.name] = handle
        return handle

    def init(self) -> "Worker":
        """Starts the chips and sub workers."""
        self._w.init()
        _live_workers.add(self)
        return self

    def close(self) -> bool:
        """Stops every worker and child process (True when all stopped in time)."""
        _live_workers.discard(self)
        return self._w.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- memory -------------------------------------------------------------------------

    def create_buffer(self, shape: Union[int, Sequence[int]], dtype: Any = "float32") -> np.ndarray:
        """A zero-filled array in memory the chips see (shared memory in child-process
        mode); tasks use it in place, and the host reads results from it without a copy."""
        dims = _tensors.dims(shape, "create_buffer", WorkerError)
        name = _tensors.dtype_name(dtype, WorkerError)
        return _tensors.array_of(self._w.create_buffer(dims, name))

    # -- runs ---------------------------------------------------------------------------

    def run(
        self,
        orch_fn: Callable[[Orchestrator, TaskArgs, CallConfig], Any],
        args: Optional[TaskArgs] = None,
        cfg: Optional[CallConfig] = None,
        *,
        timeout: Optional[float] = None,
    ) -> RunReport:
        """Calls ``orch_fn(orch, args, cfg)`` to build a run, then waits for it and returns
        its report. A failed task raises :class:`RunError`; an exception of ``orch_fn`` is
        raised as it was (tasks it started finish first, the rest are cancelled). Ctrl-C
        cancels the run (running tasks finish; a second Ctrl-C stops waiting for them) and
        raises ``KeyboardInterrupt``. ``timeout`` (seconds) cancels it the same way — tasks
        running at the deadline finish first — and raises the cancelled run's
        :class:`RunError` (kind ``cancelled``)."""
        args = args if args is not None else TaskArgs()
        cfg = cfg if cfg is not None else CallConfig()

        def entry(native: Any) -> None:
            orch_fn(Orchestrator(native, self, cfg), args, cfg)

        return self._w.run(entry, cfg, timeout)

    # -- facts --------------------------------------------------------------------------

    @property
    def chips(self) -> int:
        return self._w.chips

    @property
    def sub_workers(self) -> int:
        return self._w.sub_workers

    @property
    def mode(self) -> str:
        return self._w.mode

    def child_pids(self) -> List[int]:
        """The chips' process ids (empty in in-process mode and before :meth:`init`)."""
        return list(self._w.child_pids())

    def __repr__(self) -> str:
        return f"Worker(level=3, chips={self.chips}, sub_workers={self.sub_workers}, mode={self.mode!r})"


def _sub_adapter(fn: Callable[[SubArgs], Any]) -> Callable[..., None]:
    def adapter(memories: List[Any], scalars: List[int], context: Dict[str, Any]) -> None:
        arrays = [_tensors.array_of(m) for m in memories]
        fn(SubArgs(arrays, scalars, context, [m.dtype for m in memories]))

    return adapter


def empty(
    shape: Union[int, Sequence[int]], dtype: Any = "float32", *, worker: Optional[Worker] = None
) -> np.ndarray:
    """A zero-filled array in ``worker``'s shared memory (``Worker.create_buffer``). Without
    ``worker``: the one initialised, open Worker of this process."""
    if worker is None:
        live = list(_live_workers)
        if len(live) != 1:
            raise WorkerError(
                f"pto.empty without worker=: {len(live)} initialised Workers are open; "
                "pass worker=w (or use w.create_buffer)"
            )
        worker = live[0]
    return worker.create_buffer(shape, dtype)


def resolve(
    cfg: Union[CallConfig, RuntimeEnv, None] = None,
    *,
    config: Union[CallConfig, RuntimeEnv, None] = None,
    env: Optional[Dict[str, str]] = None,
    strict_env: bool = False,
    device_memory: Optional[int] = None,
    ring_task_window: Any = None,
    ring_heap: Any = None,
    ring_dep_pool: Any = None,
) -> Resolution:
    """``pto config resolve``: the sizing a chip would bind for ``cfg`` (value and source per
    ring and resource) and the device memory it reserves.

    ``cfg`` (or ``config=``) is a :class:`CallConfig`, or a bare :class:`RuntimeEnv` standing
    for ``CallConfig(runtime_env)``; ``ring_*`` keywords override it as ``cfg.derive`` does
    (the command's ``--task-window``/``--heap``/``--dep-pool``). ``env`` is a mapping of
    ``PTO2_RING_*`` variables (default: the process environment); ``strict_env`` makes its
    problems errors; ``device_memory`` (bytes) sets ``fits``."""
    if cfg is not None and config is not None:
        raise TypeError("resolve() takes cfg or config=, not both")
    cfg = cfg if cfg is not None else config
    if isinstance(cfg, RuntimeEnv):
        cfg = CallConfig(cfg)
    if any(v is not None for v in (ring_task_window, ring_heap, ring_dep_pool)):
        cfg = (cfg or CallConfig()).derive(
            ring_task_window=ring_task_window, ring_heap=ring_heap, ring_dep_pool=ring_dep_pool
        )
    return _native.resolve(cfg, env=env, strict_env=strict_env, device_memory=device_memory)
