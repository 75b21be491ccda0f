"""The exceptions pto raises. Each carries the same information as the Rust error it stands
for, as attributes; ``str(e)`` is the Rust message."""

from __future__ import annotations

from typing import Any, List, Optional


class PtoError(Exception):
    """Base of every pto exception."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in attrs.items():
            setattr(self, key, value)


class ConfigError(PtoError, ValueError):
    """A CallConfig / RuntimeEnv value breaks its rule.

    Attributes: ``field`` (e.g. ``runtime_env.ring_heap``), ``resource`` (``ring_heap``…,
    or None), ``ring`` (0-3, or None when the value is for every ring) and ``value``.
    """

    field: Optional[str] = None
    resource: Optional[str] = None
    ring: Optional[int] = None
    value: Any = None


class WorkerError(PtoError, RuntimeError):
    """Building, starting or using a Worker failed (``option`` names a bad option)."""

    option: Optional[str] = None


class SubmitError(PtoError, RuntimeError):
    """A submit was refused; nothing was created (bad arguments, unknown worker, …)."""


class RunError(PtoError, RuntimeError):
    """A run failed.

    Attributes: ``chain`` (the failure at each level: run, task on its worker, the worker's
    own message), ``code``/``code_name``/``hint`` (the numbered error code, when there is one),
    ``kind`` (``task``, ``bind``, ``endpoint``, ``cancelled``…), ``task`` (index), ``label``,
    ``worker``, ``failed``/``skipped`` counts, and ``report`` (the whole RunReport).
    """

    chain: List[str] = []
    code: Optional[int] = None
    code_name: Optional[str] = None
    hint: Optional[str] = None
    kind: Optional[str] = None
    task: Optional[int] = None
    label: Optional[str] = None
    worker: Optional[str] = None
    failed: int = 0
    skipped: int = 0
    report: Any = None

    def __str__(self) -> str:
        # The chip's message often carries its own, more specific hint already.
        if self.hint and "hint:" not in self.message:
            return f"{self.message}\nhint: {self.hint}"
        return self.message


__all__ = ["PtoError", "ConfigError", "WorkerError", "SubmitError", "RunError"]
