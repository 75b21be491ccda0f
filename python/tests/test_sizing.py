"""Per-task ring sizing from Python: each chip job binds exactly its own CallConfig, with the
source of every value (call_config > the Worker's env > default), as `pto.resolve` says."""

import numpy as np
import pytest

import pto

MiB = 1 << 20


def three_jobs(mode, env=None):
    """Runs vector_example three times with three sizings; returns (report, configs)."""
    configs = {
        "defaults": pto.CallConfig(),
        "big_heap": pto.CallConfig(pto.RuntimeEnv(ring_heap=8 * MiB, ring_task_window=128)),
        "per_ring": pto.CallConfig(
            pto.RuntimeEnv(
                ring_task_window=[128, 64, 32, 16],
                ring_heap=[4 * MiB, 2 * MiB, MiB, MiB],
                ring_dep_pool=[256, 128, 64, 64],
            )
        ),
    }
    with pto.Worker(level=3, chips=3, mode=mode, env=env) as w:
        vec = w.register(pto.ChipCallable("vector_example"))
        w.init()
        n = 2048
        a, b = w.create_buffer(n), w.create_buffer(n)
        a[:], b[:] = 1.0, 2.0
        outs = {label: w.create_buffer(n) for label in configs}

        def orch_fn(orch, args, cfg):
            for i, (label, task_cfg) in enumerate(configs.items()):
                task_args = pto.TaskArgs().input(a).input(b).output_existing(outs[label])
                orch.submit_next_level(vec, task_args.label(label), task_cfg, worker=i)

        report = w.run(orch_fn, pto.TaskArgs(), pto.CallConfig())
        for out in outs.values():
            np.testing.assert_allclose(out, 23.0)  # (c+1)(c+2)+c with c = 3
    return report, configs


def test_each_task_binds_its_own_sizing_with_sources(mode):
    report, configs = three_jobs(mode, env={"PTO2_RING_DEP_POOL": "512"})
    by_label = {t.label: t for t in report.tasks}

    d = by_label["defaults"].sizing
    assert d.sources("heap") == ["default"] * 4
    assert d.values("dep_pool") == [512] * 4 and d.sources("dep_pool") == ["env"] * 4

    big = by_label["big_heap"].sizing
    assert [r.value for r in big.heap] == [8 * MiB] * 4
    assert {r.source for r in big.heap} == {"call_config"}
    assert big.values("ring_task_window") == [128] * 4
    assert big.sources("dep_pool") == ["env"] * 4, "unset entries fall through to the env"

    per = by_label["per_ring"].sizing
    assert per.values("task_window") == [128, 64, 32, 16]
    assert per.values("heap") == [4 * MiB, 2 * MiB, MiB, MiB]
    assert per.values("dep_pool") == [256, 128, 64, 64]
    assert set(per.sources("dep_pool")) == {"call_config"}

    env = {"PTO2_RING_DEP_POOL": "512"}
    for label, cfg in configs.items():
        chip = by_label[label].chip
        resolved = pto.resolve(cfg, env=env)
        assert str(chip.sizing) == str(resolved.sizing)
        assert chip.reserved_bytes == resolved.reserved_bytes > 0
        assert len(chip.high_water) == 4
        heaps = chip.sizing.values("heap")
        assert all(u.heap <= cap for u, cap in zip(chip.high_water, heaps))
        assert chip.high_water[0].task_window >= 1, "the job's kernels used ring 0"
    assert by_label["big_heap"].chip.reserved_bytes > by_label["per_ring"].chip.reserved_bytes


def test_derive_overrides_only_what_it_names():
    base = pto.CallConfig(pto.RuntimeEnv(ring_heap=2 * MiB, ring_dep_pool=128), enable_scope_stats=False)
    d = base.derive(ring_task_window=[64, 0, 0, 32])
    assert d.runtime_env.ring_task_window == [64, 0, 0, 32]
    assert d.runtime_env.ring_heap == [2 * MiB] * 4 and d.runtime_env.ring_dep_pool == [128] * 4
    e = d.derive(pto.RuntimeEnv(ring_heap=[0, 4 * MiB, 0, 0]), aicpu_thread_num=2)
    assert e.runtime_env.ring_heap == [2 * MiB, 4 * MiB, 2 * MiB, 2 * MiB]
    assert e.aicpu_thread_num == 2
    assert base.runtime_env.ring_task_window == [0] * 4, "derive does not change its base"


def test_resolve_reports_values_sources_and_memory():
    cfg = pto.CallConfig(pto.RuntimeEnv(ring_heap=[MiB, 0, 0, 0]))
    r = pto.resolve(cfg, env={"PTO2_RING_HEAP": "2097152"}, device_memory=1 << 40)
    assert r.sizing.heap[0].value == MiB and r.sizing.heap[0].source == "call_config"
    assert r.sizing.heap[1].value == 2 * MiB and r.sizing.heap[1].source == "env"
    assert r.sizing.task_window[0].source == "default"
    assert r.fits is True and r.reserved_bytes > 0
    assert "call_config" in r.table()
    assert '"rings"' in r.to_json()
    assert pto.resolve(cfg, env={}, device_memory=1024).fits is False
    bad = pto.resolve(env={"PTO2_RING_HEAP": "nonsense"})
    assert bad.env_problems and bad.sizing.heap[0].source == "default"
    with pytest.raises(pto.ConfigError):
        pto.resolve(env={"PTO2_RING_HEAP": "nonsense"}, strict_env=True)


def test_resolve_takes_a_runtime_env_and_flag_overrides():
    r = pto.resolve(pto.RuntimeEnv(ring_heap=2 * MiB), env={}, ring_task_window=[64, 0, 0, 0])
    assert r.sizing.values("heap") == [2 * MiB] * 4
    assert r.sizing.task_window[0].value == 64 and r.sizing.task_window[0].source == "call_config"
    assert r.sizing.task_window[1].source == "default"
    assert str(pto.resolve(config=pto.CallConfig(), env={})) == str(pto.resolve(env={}))
    with pytest.raises(pto.ConfigError) as e:
        pto.resolve(env={}, ring_heap=[MiB, MiB, 100, MiB])
    assert (e.value.ring, e.value.value) == (2, 100)


def test_a_sizing_prints_as_the_cli_table_does():
    r = pto.resolve(pto.RuntimeEnv(ring_heap=[4 * MiB, MiB, 1088, MiB], ring_task_window=64),
                    env={"PTO2_RING_DEP_POOL": "32"})
    expected = ("task_window=64c,64c,64c,64c heap=4Mc,1Mc,1088c,1Mc "
                "dep_pool=32e,32e,32e,32e")
    assert str(r.sizing) == expected and str(r) == expected
    assert repr(r.sizing) == f"Sizing({expected})"
