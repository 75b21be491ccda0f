"""Bad configs raise pto.ConfigError naming the field, the ring and the value; nothing runs."""

import pytest

import pto


@pytest.mark.parametrize(
    "kwargs, field, ring, value",
    [
        ({"ring_heap": 1000}, "runtime_env.ring_heap", None, 1000),
        ({"ring_heap": [1 << 20, 1 << 20, 100, 1 << 20]}, "runtime_env.ring_heap", 2, 100),
        ({"ring_task_window": 3}, "runtime_env.ring_task_window", None, 3),
        ({"ring_dep_pool": [64, 64, 64, 1]}, "runtime_env.ring_dep_pool", 3, 1),
        ({"ring_task_window": [16, -1, 0, 0]}, "runtime_env.ring_task_window", 1, -1),
        ({"ring_heap": 1 << 70}, "runtime_env.ring_heap", None, 1 << 70),
        ({"ring_heap": 1.5}, "runtime_env.ring_heap", None, 1.5),
        ({"ring_heap": [1 << 20] * 3}, "runtime_env.ring_heap", None, 3),
    ],
)
def test_runtime_env_values_are_checked_where_given(kwargs, field, ring, value):
    with pytest.raises(pto.ConfigError) as e:
        pto.RuntimeEnv(**kwargs)
    err = e.value
    assert isinstance(err, ValueError)
    assert (err.field, err.ring, err.value) == (field, ring, value)
    assert err.resource == field.split(".")[1]
    assert field in str(err)
    if ring is None:
        assert f"{field}[" not in str(err), "one value for every ring names no ring"


def test_call_config_and_derive_are_checked_too():
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig(enable_scope_stats=True)  # nowhere to write them
    assert e.value.field == "output_prefix"
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig(aicpu_thread_num=1000)
    assert (e.value.field, e.value.value) == ("aicpu_thread_num", 1000)
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig().derive(ring_heap=[0, 0, 0, 65])
    assert (e.value.field, e.value.ring, e.value.value) == ("runtime_env.ring_heap", 3, 65)
    ok = pto.CallConfig(enable_scope_stats=True, output_prefix="/tmp/pto-stats")
    assert ok.output_prefix == "/tmp/pto-stats"


def test_the_error_codes_table_is_available():
    codes = {name: (code, hint) for code, name, hint in pto.error_codes()}
    assert codes["HEAP_RING_DEADLOCK"][0] == 2
    assert all(hint for _, hint in codes.values())


def test_derive_reports_a_bad_single_value_for_every_ring():
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig().derive(ring_task_window=100)
    assert (e.value.ring, e.value.value) == (None, 100)
    assert str(e.value).startswith("runtime_env.ring_task_window=100:")
