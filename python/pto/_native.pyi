"""Type stubs of pto._native, the Rust side of the pto package (use the names re-exported by
``pto``; the underscored ones are internal)."""

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

_RingValue = Union[int, Sequence[int], None]

class RuntimeEnv:
    """Per-task ring sizing: each field an int (every ring) or four ints (one per ring);
    0 = unset. Raises ConfigError (field, ring, value) for a value that breaks its rule."""

    def __init__(
        self,
        ring_task_window: _RingValue = None,
        ring_heap: _RingValue = None,
        ring_dep_pool: _RingValue = None,
    ) -> None: ...
    @property
    def ring_task_window(self) -> List[int]: ...
    @property
    def ring_heap(self) -> List[int]: ...
    @property
    def ring_dep_pool(self) -> List[int]: ...
    def is_unset(self) -> bool: ...

class CallConfig:
    """A task's configuration; validated when built (ConfigError)."""

    def __init__(
        self,
        runtime_env: Optional[RuntimeEnv] = None,
        *,
        aicpu_thread_num: Optional[int] = None,
        enable_scope_stats: bool = False,
        enable_dep_gen: bool = False,
        enable_chip_swimlane: int = 0,
        output_prefix: Optional[str] = None,
        track_war: bool = False,
        war_check: str = "auto",
    ) -> None: ...
    def derive(
        self,
        runtime_env: Optional[RuntimeEnv] = None,
        *,
        aicpu_thread_num: Optional[int] = None,
        ring_task_window: _RingValue = None,
        ring_heap: _RingValue = None,
        ring_dep_pool: _RingValue = None,
        track_war: Optional[bool] = None,
    ) -> "CallConfig":
        """A copy whose non-zero sizing entries (and track_war, when given) replace this config's."""
    @property
    def runtime_env(self) -> RuntimeEnv: ...
    @property
    def aicpu_thread_num(self) -> int: ...
    @property
    def enable_scope_stats(self) -> bool: ...
    @property
    def enable_dep_gen(self) -> bool: ...
    @property
    def enable_chip_swimlane(self) -> int: ...
    @property
    def output_prefix(self) -> Optional[str]: ...
    @property
    def track_war(self) -> bool: ...
    @property
    def war_check(self) -> str: ...

class Resolved:
    """One resolved value and its source: ``call_config``, ``env`` or ``default``."""

    value: int
    source: str

class Sizing:
    """A chip's resolved sizing: per resource, one Resolved per ring."""

    task_window: List[Resolved]
    heap: List[Resolved]
    dep_pool: List[Resolved]
    ring_task_window: List[Resolved]
    ring_heap: List[Resolved]
    ring_dep_pool: List[Resolved]
    text: str
    def values(self, resource: str) -> List[int]: ...
    def sources(self, resource: str) -> List[str]: ...
    def __getitem__(self, resource: str) -> List[Resolved]: ...

class RingUsage:
    """Peak use of one ring during a chip run."""

    task_window: int
    heap: int
    dep_pool: int

class ChipReport:
    chip: int
    label: Optional[str]
    sizing: Sizing
    reserved_bytes: int
    high_water: List[RingUsage]
    tasks: int
    aicpu_threads: int
    wall: float
    env_problems: List[str]
    diagnostics: List[str]
    warnings: List[str]

class MemberReport:
    worker: str
    exec_time: float
    chip: Optional[ChipReport]

class TaskReport:
    index: int
    label: Optional[str]
    kind: str
    callable: str
    ok: bool
    outcome: str
    error: Optional[str]
    code: Optional[int]
    code_name: Optional[str]
    producers: List[int]
    members: List[MemberReport]
    chip: Optional[ChipReport]
    sizing: Optional[Sizing]
    reserved_bytes: Optional[int]
    high_water: Optional[List[RingUsage]]
    sizing_from: Optional[str]

class RunReport:
    run_id: int
    wall: float
    tasks: List[TaskReport]
    def task(self, label: str) -> Optional[TaskReport]: ...
    def __len__(self) -> int: ...

class Resolution:
    """What ``pto.resolve`` found (``pto config resolve``)."""

    sizing: Sizing
    reserved_bytes: int
    fits: Optional[bool]
    env_problems: List[str]
    def table(self) -> str: ...
    def to_json(self) -> str: ...

class CallableHandle:
    name: str
    kind: str

class _Memory:
    base_address: int
    owner_uid: int
    buffer_bytes: int
    dtype: str
    @property
    def __array_interface__(self) -> Dict[str, Any]: ...

class _Orchestrator:
    depth: int
    submitted_tasks: int
    next_level_workers: int
    sub_workers: int
    run_id: int
    def submit_next_level(self, handle: CallableHandle, args: tuple, config: CallConfig, worker: int) -> int: ...
    def submit_next_level_group(self, handle: CallableHandle, members: List[tuple], config: CallConfig, workers: List[int]) -> int: ...
    def submit_sub(self, handle: CallableHandle, args: tuple) -> int: ...
    def submit_sub_group(self, handle: CallableHandle, members: List[tuple]) -> int: ...
    def enter_scope(self) -> None: ...
    def exit_scope(self) -> None: ...
    def alloc(self, shape: List[int], dtype: str) -> _Memory: ...

class _Worker:
    chips: int
    sub_workers: int
    mode: str
    def __init__(
        self,
        level: int,
        chips: int,
        sub_workers: int,
        mode: str,
        heap_ring_size: Optional[int] = None,
        task_timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        strict_env: bool = False,
        lane_depth: Optional[int] = None,
        track_war: bool = False,
    ) -> None: ...
    uid: int
    def register_chip(self, name: str) -> CallableHandle: ...
    def register_sub(self, name: str, adapter: Callable[..., None]) -> CallableHandle: ...
    def init(self) -> None: ...
    def create_buffer(self, shape: List[int], dtype: str) -> _Memory: ...
    def run(self, orch_fn: Callable[[_Orchestrator], None], config: CallConfig, timeout: Optional[float] = None) -> RunReport: ...
    def close(self) -> bool: ...
    def child_pids(self) -> List[int]: ...

def resolve(
    config: Optional[CallConfig] = None,
    *,
    env: Optional[Mapping[str, str]] = None,
    strict_env: bool = False,
    device_memory: Optional[int] = None,
) -> Resolution: ...
def scene_cases(path: str) -> List[Tuple[str, Optional[str], Optional[str]]]: ...
def scene_names() -> List[str]: ...
def run_scene_case(path: str, case: str, mode: str = "child-process", fast: bool = False) -> Tuple[bool, str, str]: ...
def error_codes() -> List[Tuple[int, str, str]]: ...
def chip_callables() -> List[str]: ...
def _child_main() -> None: ...
def _set_child_command(program: str, args: List[str]) -> None: ...
