"""pytest helpers: run scene files' cases as tests.

    import pytest, pto.testing

    @pytest.mark.parametrize("case", pto.testing.scene_cases("scenes/x.toml"))
    def test_scene(case):
        case.run()

Each case becomes one test per mode (``name[child-process]``, ``name[in-process]``); a case
with ``ignore`` is skipped with its reason. The scenes a file names must be linked into the
module (the shipped scenes are; ``pto._native.scene_names()`` lists them).
"""

from __future__ import annotations

import inspect
import os
from typing import Any, List, Optional, Sequence

from . import _native

MODES = ("child-process", "in-process")


class SceneCase:
    """One case of a scene file in one mode."""

    def __init__(self, path: str, name: str, mode: str, fast: bool, expect_failure: Optional[str]):
        self.path = path
        self.name = name
        self.mode = mode
        self.fast = fast
        self.expect_failure = expect_failure

    def run(self) -> None:
        """Runs the case as ``pto run`` does; AssertionError with its table when it fails."""
        passed, table, why = _native.run_scene_case(self.path, self.name, self.mode, self.fast)
        if not passed:
            raise AssertionError(f"case {self.name} failed in {self.mode} mode: {why}\n{table}")

    def __repr__(self) -> str:
        return f"SceneCase({self.name!r}, mode={self.mode!r})"


def _locate(path: str, caller_dir: Optional[str]) -> str:
    if os.path.isabs(path) or os.path.exists(path) or caller_dir is None:
        return os.path.abspath(path)
    beside = os.path.join(caller_dir, path)
    return beside if os.path.exists(beside) else os.path.abspath(path)


def scene_cases(path: "os.PathLike[str] | str", *, modes: Sequence[str] = MODES, fast: bool = False) -> List[Any]:
    """``pytest.param`` values, one per case and mode of the scene file at ``path``
    (relative to the current directory, else to the calling file)."""
    import pytest

    frame = inspect.stack()[1]
    caller_dir = os.path.dirname(os.path.abspath(frame.filename)) if frame.filename else None
    full = _locate(os.fspath(path), caller_dir)
    if not os.path.exists(full):
        raise FileNotFoundError(f"scene file {os.fspath(path)!r} (looked at {full})")
    params = []
    for name, ignore, expect in _native.scene_cases(full):
        for mode in modes:
            marks = [pytest.mark.skip(reason=f"ignored: {ignore}")] if ignore is not None else []
            params.append(
                pytest.param(SceneCase(full, name, mode, fast, expect), id=f"{name}[{mode}]", marks=marks)
            )
    return params
