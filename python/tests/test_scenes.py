"""Scene files as pytest cases (pto.testing.scene_cases), for the scenes linked into pto."""

import os
import textwrap

import pytest

import pto
import pto.testing

SCENES = os.path.join(os.path.dirname(__file__), "..", "..", "scenes")


@pytest.mark.parametrize("case", pto.testing.scene_cases(os.path.join(SCENES, "per_task_runtime_env_l2.toml")))
def test_l2_scene_file(case):
    case.run()


@pytest.mark.parametrize("case", pto.testing.scene_cases("../../scenes/per_task_runtime_env.toml", fast=True))
def test_l3_scene_file_relative_to_this_file(case):
    case.run()


def test_cases_and_modes_become_test_ids():
    ids = [p.id for p in pto.testing.scene_cases(os.path.join(SCENES, "per_task_runtime_env_l2.toml"))]
    assert "defaults[in-process]" in ids and "defaults[child-process]" in ids


def test_a_failing_case_raises_with_its_table(tmp_path):
    scene = tmp_path / "tight.toml"
    scene.write_text(textwrap.dedent("""
        scene = "vector_example"
        level = 2

        [[cases]]
        name = "tight_heap"
        params = { n = 16384 }
        [cases.config.runtime_env]
        ring_heap = 4096

        [[cases]]
        name = "expected"
        expect_failure = "HEAP_RING_DEADLOCK"
        params = { n = 16384 }
        [cases.config.runtime_env]
        ring_heap = 4096

        [[cases]]
        name = "skipped"
        ignore = "not today"
    """))
    params = pto.testing.scene_cases(scene, modes=["in-process"])
    by_name = {p.values[0].name: p for p in params}
    with pytest.raises(AssertionError, match="HEAP_RING_DEADLOCK") as e:
        by_name["tight_heap"].values[0].run()
    assert "case tight_heap failed in in-process mode" in str(e.value)
    by_name["expected"].values[0].run()
    assert by_name["skipped"].marks[0].kwargs["reason"] == "ignored: not today"


def test_a_bad_scene_file_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('scene = "no_such_scene"\n')
    with pytest.raises(pto.ConfigError, match="no_such_scene"):
        pto.testing.scene_cases(bad)
