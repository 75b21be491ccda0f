"""Failures as Python exceptions: RunError with chain, code and hint; a failing Python sub
function; orchestration exceptions; refused submits; Ctrl-C cancelling a run."""

import _thread
import threading
import time

import numpy as np
import pytest

import pto


def test_a_chip_failure_is_a_run_error_with_code_hint_and_report(worker):
    worker.init()
    n = 1 << 14
    a, b, f = (worker.create_buffer(n) for _ in range(3))
    ok = worker.create_buffer(n)

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(b).output_existing(ok).label("fine"), cfg, worker=1)
        tight = cfg.derive(ring_heap=4096)
        orch.submit_next_level(worker.vec, pto.TaskArgs().input(a).input(b).output_existing(f).label("tight"), tight, worker=0)

    with pytest.raises(pto.RunError) as e:
        worker.run(orch_fn)
    err = e.value
    assert (err.code, err.code_name, err.kind) == (2, "HEAP_RING_DEADLOCK", "task")
    assert err.label == "tight" and err.task == 1
    assert err.chain[0].startswith("run ") and "'tight'" in err.chain[1]
    assert "ring_heap[0] (4096, from call_config)" in err.chain[2]
    assert "raise runtime_env.ring_heap" in err.hint and "hint:" in str(err)
    tasks = {t.label: t for t in err.report.tasks}
    assert tasks["fine"].ok and tasks["tight"].outcome == "failed"
    assert tasks["tight"].code_name == "HEAP_RING_DEADLOCK"
    # The Worker stays usable.
    worker.run(lambda orch, args, cfg: orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(b).output_existing(ok), cfg))


def test_a_failing_python_sub_function_fails_its_task_and_skips_its_readers(worker):
    both_submitted = threading.Event()

    def boom(args):
        # Fail only once the reader is submitted: a submit after a failure is refused instead
        # (fail-fast, the next test).
        both_submitted.wait(10)
        raise ValueError("boom at element 3")

    def never(args):
        raise AssertionError("a reader of a failed task ran")

    bad, reader = worker.register(boom), worker.register(never)
    worker.init()
    buf = worker.create_buffer(8)

    def orch_fn(orch, args, cfg):
        orch.submit_sub(bad, pto.TaskArgs().output_existing(buf).label("boom"))
        orch.submit_sub(reader, pto.TaskArgs().input(buf).label("reader"))
        both_submitted.set()

    with pytest.raises(pto.RunError) as e:
        worker.run(orch_fn)
    err = e.value
    assert err.label == "boom" and err.kind == "task"
    assert "ValueError: boom at element 3" in err.chain[2]
    assert "in boom" in err.chain[2], "the traceback names the function"
    assert err.skipped == 1
    assert err.report.task("reader").outcome == "skipped"


def test_a_submit_after_a_failure_raises_the_run_error_in_the_orchestration(worker):
    failed = threading.Event()

    def boom(args):
        failed.set()
        raise ValueError("first")

    bad, fine = worker.register(boom), worker.register(lambda args: None)
    worker.init()
    seen = []

    def orch_fn(orch, args, cfg):
        orch.submit_sub(bad, pto.TaskArgs().label("first"))
        failed.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the failure reaches the engine right after
            try:
                orch.submit_sub(fine, pto.TaskArgs().label("later"))
            except pto.RunError as e:
                seen.append(e)
                raise
            time.sleep(0.01)

    with pytest.raises(pto.RunError) as e:
        worker.run(orch_fn)
    assert seen and seen[0].label == "first" and "ValueError: first" in seen[0].chain[2]
    assert e.value is seen[0], "the orchestration's exception comes out of run as it was"
    # ... brought up to the run's final failure: the full report, whatever the submit saw.
    assert e.value.report.task("first").outcome == "failed"
    assert [t.label for t in e.value.report.tasks][:1] == ["first"]


def test_an_orchestration_exception_is_raised_as_it_was(worker):
    worker.init()

    class Mine(Exception):
        pass

    def orch_fn(orch, args, cfg):
        raise Mine("my own error")

    with pytest.raises(Mine, match="my own error"):
        worker.run(orch_fn)
    worker.run(lambda orch, args, cfg: None)  # usable afterwards


def test_refused_submits_raise_submit_error(worker):
    worker.init()
    a = worker.create_buffer(64)
    caught = []

    def orch_fn(orch, args, cfg):
        with pytest.raises(pto.SubmitError, match="no worker 5"):
            orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(a).output_existing(a), cfg, worker=5)
        with pytest.raises(pto.SubmitError):
            orch.submit_sub(worker.add)  # a chip callable as a sub task
        with pytest.raises(pto.SubmitError, match="scalar"):
            pto.TaskArgs().scalar(True)
        caught.append(orch.submitted_tasks)

    worker.run(orch_fn)
    assert caught == [0]


def test_an_orchestrator_kept_after_its_function_returns_is_refused(worker):
    worker.init()
    kept = []
    worker.run(lambda orch, args, cfg: kept.append(orch))
    with pytest.raises(pto.WorkerError, match="has returned"):
        kept[0].submit_sub(worker.add)


def test_a_worker_used_before_init_or_after_close(mode):
    w = pto.Worker(level=3, chips=1, mode=mode)
    with pytest.raises(pto.WorkerError, match="not initialised"):
        w.run(lambda orch, args, cfg: None)
    w.init()
    w.close()
    with pytest.raises(pto.WorkerError, match="closed"):
        w.run(lambda orch, args, cfg: None)


def test_ctrl_c_during_run_cancels_it_cleanly(mode):
    started = []

    def slow(args):
        started.append(args.task)
        time.sleep(0.4)

    with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
        s = w.register(slow)
        w.init()
        buf = w.create_buffer(4)

        def orch_fn(orch, args, cfg):
            for i in range(6):  # a chain: each waits for the one before
                orch.submit_sub(s, pto.TaskArgs().inout(buf).label(f"step{i}"))

        threading.Timer(0.2, _thread.interrupt_main).start()
        begun = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            w.run(orch_fn)
        elapsed = time.monotonic() - begun
        assert started == [0], "only the running task finished; the rest were cancelled"
        assert elapsed < 2.0, f"cancelling took {elapsed:.2f} s"
        report = w.run(lambda orch, args, cfg: orch.submit_sub(s))
        assert report.tasks[0].ok, "the Worker runs again after the interrupt"


def test_a_run_timeout_cancels_the_rest(mode):
    def slow(args):
        time.sleep(0.3)

    with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
        s = w.register(slow)
        w.init()
        buf = w.create_buffer(4)

        def orch_fn(orch, args, cfg):
            for _ in range(5):
                orch.submit_sub(s, pto.TaskArgs().inout(buf))

        with pytest.raises(pto.RunError) as e:
            w.run(orch_fn, timeout=0.1)
        assert e.value.kind == "cancelled" and "timeout" in str(e.value)
        assert (e.value.task, e.value.label, e.value.worker) == (None, None, None)
        rest = e.value.report.tasks[1:]
        assert [t.outcome for t in rest] == ["skipped"] * 4
        assert "cancelled: the run's timeout passed" in rest[0].error


def test_a_second_ctrl_c_stops_waiting_for_a_task_that_does_not_end(mode):
    release = threading.Event()

    def stuck(args):
        release.wait(20)  # a sub function that ignores the cancel

    with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
        s = w.register(stuck)
        w.init()
        threading.Timer(0.2, _thread.interrupt_main).start()
        threading.Timer(0.6, _thread.interrupt_main).start()
        begun = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            w.run(lambda orch, args, cfg: orch.submit_sub(s))
        elapsed = time.monotonic() - begun
        release.set()  # lets close() finish the task
    assert 0.5 < elapsed < 3.0, f"w.run returned {elapsed:.2f} s after it began"
