"""The API end to end: chip jobs, sub functions, scopes, intermediates, groups, in both
endpoint modes."""

import os

import numpy as np
import pytest

import pto


def vector_golden(a, b):
    c = a + b
    return (c + 1) * (c + 2) + c


def test_chip_jobs_fan_out_and_results_land_in_place(worker):
    worker.init()
    n = 4096
    a, b = worker.create_buffer(n), worker.create_buffer(n)
    a[:] = np.arange(n, dtype=np.float32)
    b[:] = 0.5
    outs = [worker.create_buffer(n) for _ in range(3)]

    def orch_fn(orch, args, cfg):
        assert orch.next_level_workers == 2 and orch.sub_workers == 2
        for i, out in enumerate(outs):
            task_args = pto.TaskArgs().input(a).input(b).output_existing(out).label(f"job{i}")
            orch.submit_next_level(worker.vec, task_args, cfg, worker=i % 2)

    report = worker.run(orch_fn, pto.TaskArgs(), pto.CallConfig())
    assert [t.label for t in report.tasks] == ["job0", "job1", "job2"]
    assert all(t.ok and t.outcome == "completed" for t in report.tasks)
    assert [t.chip.chip for t in report.tasks] == [0, 1, 0]
    for out in outs:
        np.testing.assert_allclose(out, vector_golden(a, b), rtol=1e-6)


def test_sub_functions_run_in_this_process_and_follow_their_producers(worker):
    seen = []

    def scale(args):
        src, dst = args.tensors
        dst[:] = src * args.scalar(0, "float32")
        seen.append((os.getpid(), args.label, args.task))

    sub = worker.register(scale)
    assert sub.kind == "sub" and sub.name == "scale"
    worker.init()
    n = 256
    a, b, mid, out = (worker.create_buffer(n) for _ in range(4))
    a[:], b[:] = 1.0, 2.0

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(b).output_existing(mid), cfg)
        orch.submit_sub(sub, pto.TaskArgs().input(mid).output_existing(out).scalar(10.0).label("scale"))

    report = worker.run(orch_fn)
    assert (out == 30.0).all()
    assert seen == [(os.getpid(), "scale", 1)]
    assert report.tasks[1].producers == [0], "the sub task waited for the chip job"
    assert report.tasks[1].kind == "sub" and report.tasks[1].sizing is None


def test_scopes_and_intermediates_pass_data_between_tasks(worker):
    def fill(args):
        args[0][:] = args.scalar(0, "float32")

    def copy(args):
        args[1][:] = args[0]

    f, c = worker.register(fill), worker.register(copy)
    worker.init()
    n = 1024
    out = worker.create_buffer(n)
    depths = []

    def orch_fn(orch, args, cfg):
        with orch.scope():
            depths.append(orch.depth)
            t = orch.alloc((n,), "float32")
            assert t.shape == (n,) and t.dtype == np.float32
            orch.submit_sub(f, pto.TaskArgs().inout(t).scalar(7.5))
            orch.submit_sub(c, pto.TaskArgs().input(t).output_existing(out))
        depths.append(orch.depth)

    report = worker.run(orch_fn)
    assert depths == [1, 0]
    assert (out == 7.5).all()
    assert report.tasks[1].producers == [0]


def test_a_group_runs_one_member_per_chip(worker):
    worker.init()
    n = 512
    a = worker.create_buffer(n)
    a[:] = 1.0
    outs = [worker.create_buffer(n) for _ in range(2)]

    def orch_fn(orch, args, cfg):
        members = [pto.TaskArgs().input(a).input(a).output_existing(o) for o in outs]
        orch.submit_next_level_group(worker.add, members, cfg, workers=[0, 1])

    report = worker.run(orch_fn)
    assert [m.chip.chip for m in report.tasks[0].members] == [0, 1]
    assert all((o == 2.0).all() for o in outs)


def test_a_worker_runs_many_runs_and_the_args_reach_the_function(worker):
    worker.init()
    a = worker.create_buffer(64)
    got = []

    def orch_fn(orch, args, cfg):
        got.append((args.scalars, cfg.runtime_env.ring_heap[0]))

    base = pto.CallConfig(pto.RuntimeEnv(ring_heap=1 << 20))
    for i in range(3):
        worker.run(orch_fn, pto.TaskArgs().input(a).scalar(i), base)
    assert got == [([0], 1 << 20), ([1], 1 << 20), ([2], 1 << 20)]


def test_child_process_mode_keeps_chips_in_child_processes():
    with pto.Worker(level=3, chips=2, sub_workers=1, mode="child-process") as w:
        w.register(pto.ChipCallable("elementwise_add"))
        w.init()
        pids = w.child_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        for pid in pids:
            os.kill(pid, 0)  # alive
    with pto.Worker(level=3, chips=1, mode="in-process") as w:
        w.init()
        assert w.child_pids() == []


def test_reference_spellings_and_context_manager():
    with pto.Worker(level=3, device_ids=[0, 1], num_sub_workers=1, mode="in-process") as w:
        assert (w.chips, w.sub_workers, w.mode) == (2, 1, "in-process")
    with pytest.raises(pto.WorkerError) as e:
        pto.Worker(level=3, chips=1, mode="threads")
    assert e.value.option == "mode"
    with pytest.raises(pto.WorkerError):
        pto.Worker(level=2, chips=1)


def test_the_gil_is_released_while_a_run_executes(mode):
    import threading
    import time

    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    def slow(args):
        time.sleep(0.3)  # sleeping releases the GIL too; the waiter must not hold it

    with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
        s = w.register(slow)
        w.init()
        t = threading.Thread(target=ticker)
        t.start()
        before = len(ticks)
        w.run(lambda orch, args, cfg: orch.submit_sub(s))
        stop.set()
        t.join()
    assert len(ticks) - before > 20, "another Python thread ran during the run"


def test_a_sub_worker_thread_keeps_its_python_thread_state(mode):
    import threading

    local = threading.local()
    counts = []

    def count(args):
        local.n = getattr(local, "n", 0) + 1  # per thread state: lost if it were recreated
        counts.append(local.n)

    with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
        c = w.register(count)
        w.init()
        buf = w.create_buffer(4)
        for _ in range(2):
            w.run(lambda orch, args, cfg: [orch.submit_sub(c, pto.TaskArgs().inout(buf)) for _ in range(3)])
    assert counts == [1, 2, 3, 4, 5, 6]
