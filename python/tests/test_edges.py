"""Edges a demanding user hits: other Workers' arrays, out-of-range numbers, threads, failed
chip tasks' sizing, write ordering, closed Workers."""

import threading

import numpy as np
import pytest

import pto

MiB = 1 << 20


def test_another_workers_array_is_foreign(worker):
    worker.init()
    with pto.Worker(level=3, chips=1, mode="in-process") as other:
        other.init()
        theirs = other.create_buffer(256)
        theirs[:] = 4.0
        out = worker.create_buffer(256)
        report = worker.run(
            lambda orch, a, c: orch.submit_next_level(
                worker.add, pto.TaskArgs().input(theirs).input(theirs).output_existing(out), c
            )
        )
        assert report.tasks[0].ok and (out == 8.0).all(), "copied in as an input"
        with pytest.raises(pto.SubmitError, match="memory of another Worker"):
            worker.run(
                lambda orch, a, c: orch.submit_next_level(
                    worker.add, pto.TaskArgs().input(out).input(out).output_existing(theirs), c
                )
            )


def test_out_of_range_numbers_raise_the_documented_errors(worker):
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig(aicpu_thread_num=-1)
    assert (e.value.field, e.value.value) == ("aicpu_thread_num", -1)
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig(enable_chip_swimlane=300)
    assert e.value.field == "enable_chip_swimlane"
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig().derive(aicpu_thread_num=-2)
    assert e.value.value == -2
    for option, kwargs in [("chips", {"chips": -1}), ("sub_workers", {"sub_workers": -1}),
                           ("heap_ring_size", {"heap_ring_size": -5}),
                           ("task_timeout", {"task_timeout": -1.0})]:
        with pytest.raises(pto.WorkerError) as e:
            pto.Worker(level=3, mode="in-process", **kwargs)
        assert e.value.option == option
    worker.init()
    for shape in (-1, 1 << 40, (4, -2), 2.5):
        with pytest.raises(pto.WorkerError, match="create_buffer"):
            worker.create_buffer(shape)
    a = worker.create_buffer(16)

    def orch_fn(orch, args, cfg):
        with pytest.raises(pto.SubmitError, match="worker = -1"):
            orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(a).output_existing(a), cfg, worker=-1)
        with pytest.raises(pto.SubmitError, match="alloc"):
            orch.alloc(1 << 34)

    worker.run(orch_fn)


def test_a_strict_environment_problem_names_the_variable_and_ring():
    with pytest.raises(pto.ConfigError) as e:
        pto.resolve(env={"PTO2_RING_HEAP": "1048576,2097152,oops,1048576"}, strict_env=True)
    err = e.value
    assert (err.field, err.resource, err.ring) == ("PTO2_RING_HEAP", "ring_heap", 2)
    assert err.value == "1048576,2097152,oops,1048576"


def test_a_chip_task_that_failed_still_shows_the_sizing_it_bound(worker):
    worker.init()
    n = 1 << 14
    a, b, f = (worker.create_buffer(n) for _ in range(3))
    tight = pto.CallConfig(pto.RuntimeEnv(ring_heap=4096, ring_task_window=64))

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.vec, pto.TaskArgs().input(a).input(b).output_existing(f).label("tight"), tight)

    with pytest.raises(pto.RunError) as e:
        worker.run(orch_fn)
    task = e.value.report.task("tight")
    assert task.chip is None and task.sizing_from == "resolved"
    assert task.sizing.values("heap") == [4096] * 4 and set(task.sizing.sources("heap")) == {"call_config"}
    assert task.sizing.task_window[0].value == 64
    assert task.reserved_bytes == pto.resolve(tight, env={}).reserved_bytes or task.reserved_bytes > 0
    assert task.high_water is None
    ok = worker.run(lambda orch, args, cfg: orch.submit_next_level(worker.vec, pto.TaskArgs().input(a).input(b).output_existing(f), cfg))
    assert ok.tasks[0].sizing_from == "chip"


def test_the_orchestrator_refuses_other_threads(worker):
    worker.init()
    errors = []

    def orch_fn(orch, args, cfg):
        def elsewhere():
            try:
                orch.submit_sub(worker.add)
            except Exception as e:  # a pto error, not a PanicException (a BaseException)
                errors.append(e)

        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()

    worker.run(orch_fn)
    assert len(errors) == 1 and isinstance(errors[0], pto.WorkerError)
    assert "thread running its orchestration function" in str(errors[0])


def read_then_overwrite(mode, *, track_war=False, tracked=False):
    """A slow sub task reads a buffer holding 1.0, then a sub task overwrites it with 42.0:
    what the read saw, and the writer's producers."""
    import time

    seen = []

    def slow_read(args):
        time.sleep(0.2)
        seen.append(float(args[0][0]))

    def write(args):
        args[0][:] = 42.0

    with pto.Worker(level=3, chips=1, sub_workers=2, mode=mode, track_war=track_war) as w:
        r, wr = w.register(slow_read), w.register(write)
        w.init()
        s = w.create_buffer(4)
        s[:] = 1.0

        def orch_fn(orch, args, cfg):
            read = pto.TaskArgs().tracked_input(s) if tracked else pto.TaskArgs().input(s)
            orch.submit_sub(r, read)
            orch.submit_sub(wr, pto.TaskArgs().output_existing(s))

        report = w.run(orch_fn)
    return seen, report.tasks[1].producers


def test_track_war_orders_a_writer_after_earlier_readers(mode):
    for track, expected in ((True, [1.0]), (False, [42.0])):
        seen, producers = read_then_overwrite(mode, track_war=track)
        assert seen == expected, f"track_war={track}"
        assert producers == ([0] if track else [])


def test_a_closed_worker_makes_no_buffers(mode):
    w = pto.Worker(level=3, chips=1, mode=mode)
    w.init()
    w.close()
    with pytest.raises(pto.WorkerError, match="closed"):
        w.create_buffer(8)
    with pytest.raises(pto.WorkerError, match="closed"):
        w.run(lambda orch, args, cfg: None)


def test_create_buffer_dtype_errors_are_worker_errors():
    with pto.Worker(level=3, chips=1, mode="in-process") as w:
        w.init()
        with pytest.raises(pto.WorkerError, match="dtype float64"):
            w.create_buffer(4, "float64")
        with pytest.raises(pto.SubmitError, match="no sub workers"):
            w.run(lambda orch, args, cfg: orch.submit_sub(w.register(lambda a: None)))


def test_sub_functions_see_pto_dtypes(worker):
    got = []
    s = worker.register(lambda args: got.append(args.dtypes))
    worker.init()
    a, b = worker.create_buffer(4, "int32"), worker.create_buffer(4, "bfloat16")
    worker.run(lambda orch, args, cfg: orch.submit_sub(s, pto.TaskArgs().input(a).input(b)))
    assert got == [["int32", "bfloat16"]]


def test_a_missing_scene_file_is_file_not_found():
    import pto.testing

    with pytest.raises(FileNotFoundError):
        pto.testing.scene_cases("no/such/scene.toml")


def test_ctrl_c_cancels_independent_queued_sub_tasks(mode):
    import _thread
    import time

    started = []

    def slow(args):
        started.append(args.task)
        time.sleep(0.5)

    with pto.Worker(level=3, chips=1, sub_workers=2, mode=mode) as w:
        s = w.register(slow)
        w.init()
        threading.Timer(0.3, _thread.interrupt_main).start()
        begun = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            w.run(lambda orch, args, cfg: [orch.submit_sub(s) for _ in range(20)])
        elapsed = time.monotonic() - begun
    assert elapsed < 1.5, f"{elapsed:.2f} s: queued tasks ran after the interrupt"
    assert len(started) <= 4, started


def test_a_kernel_panic_is_reported_once_not_printed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "panic.py"
    script.write_text(
        "import pto\n"
        "for mode in ('in-process', 'child-process'):\n"
        "    with pto.Worker(level=3, chips=1, mode=mode) as w:\n"
        "        add = w.register(pto.ChipCallable('elementwise_add')); w.init()\n"
        "        a = w.create_buffer(64, 'int32')  # the kernel reads float32\n"
        "        try:\n"
        "            w.run(lambda o, x, c: o.submit_next_level(add, pto.TaskArgs().input(a).input(a).output_existing(a), c))\n"
        "        except pto.RunError as e:\n"
        "            print(e.code_name, 'dtype i32' in e.chain[2])\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["KERNEL_PANIC", "True"] * 2, done.stdout + done.stderr
    assert "panicked" not in done.stderr, done.stderr


def test_chip_jobs_carry_their_own_track_war(mode):
    """One run, two ``war_hazard`` chip jobs: the one whose CallConfig tracks write-after-read
    copies x before the overwrite; the other is reported on its own row."""
    with pto.Worker(level=3, chips=2, mode=mode) as w:
        hazard = w.register(pto.ChipCallable("war_hazard"))
        w.init()
        bufs = {name: w.create_buffer(64) for name in ("xa", "ya", "xb", "yb")}
        for name, arr in bufs.items():
            arr[:] = 1.0 if name.startswith("x") else 0.0
        base = pto.CallConfig(war_check="report")
        tracked = base.derive(track_war=True)
        assert (tracked.track_war, tracked.war_check, base.track_war) == (True, "report", False)

        def orch_fn(orch, args, cfg):
            for label, x, y, c, chip in (("tracked", "xa", "ya", tracked, 0), ("untracked", "xb", "yb", cfg, 1)):
                a = pto.TaskArgs().input(bufs[x]).output_existing(bufs[y])
                a.scalar(150_000).scalar(0).label(label)
                orch.submit_next_level(hazard, a, c, chip)

        report = w.run(orch_fn, cfg=base)
    rows = {t.label: t.members[0].chip for t in report.tasks}
    assert rows["tracked"].warnings == []
    assert len(rows["untracked"].warnings) == 1
    assert "write-after-read hazard" in rows["untracked"].warnings[0]
    assert (bufs["ya"] == 1.0).all()


def test_war_check_names_are_checked():
    with pytest.raises(pto.ConfigError) as e:
        pto.CallConfig(war_check="loud")
    assert e.value.field == "war_check"
    assert "auto, off, report, strict" in str(e.value)
    assert "track_war=True" in repr(pto.CallConfig(track_war=True))


def test_a_tracked_input_orders_a_later_writer_at_l3(mode):
    seen, producers = read_then_overwrite(mode, tracked=True)
    assert seen == [1.0]
    assert producers == [0]


def test_chip_callables_lists_only_what_users_call():
    names = pto.chip_callables()
    assert "vector_example" in names and "elementwise_add" in names
    assert not any(n.startswith("bench.") for n in names), names
    with pytest.raises(pto.WorkerError, match=r"did you mean vector_example\?"):
        with pto.Worker(level=3, chips=1, mode="in-process") as w:
            w.register(pto.ChipCallable("vector_exampel"))
