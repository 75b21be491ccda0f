"""Buffers are numpy arrays over the memory the chips see: zero copy both ways, foreign
arrays copied in only as inputs, dtypes never converted."""

import numpy as np
import pytest

import pto


def test_create_buffer_is_a_zeroed_array_whose_writes_the_chips_see(worker):
    worker.init()
    a = worker.create_buffer((4, 256), "float32")
    assert isinstance(a, np.ndarray) and a.shape == (4, 256) and a.dtype == np.float32
    assert (a == 0).all() and a.flags.writeable and a.flags.c_contiguous
    out = worker.create_buffer((4, 256))
    a[...] = 2.0  # written after creation, through the array: no copy call anywhere

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(a).input(a).output_existing(out), cfg)

    before = out.__array_interface__["data"][0]
    worker.run(orch_fn)
    assert (out == 4.0).all(), "the chip's result is in the array itself"
    assert out.__array_interface__["data"][0] == before


def test_views_name_their_part_of_the_buffer(worker):
    worker.init()
    big = worker.create_buffer(2048)
    big[:1024], big[1024:] = 1.0, 5.0
    out = worker.create_buffer(2048)
    upper, lower = big[1024:], out[:1024]
    assert np.shares_memory(upper, big)

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(upper).input(upper).output_existing(lower), cfg)

    worker.run(orch_fn)
    assert (out[:1024] == 10.0).all() and (out[1024:] == 0.0).all()


def test_sub_functions_get_views_of_the_same_memory(worker):
    ids = []

    def touch(args):
        arr = args[0]
        ids.append(arr.__array_interface__["data"][0])
        arr[::2] = 9  # written in place; the host sees it with no copy back

    t = worker.register(touch)
    worker.init()
    buf = worker.create_buffer(16, "int32")
    worker.run(lambda orch, args, cfg: orch.submit_sub(t, pto.TaskArgs().inout(buf)))
    assert ids == [buf.__array_interface__["data"][0]]
    assert buf.tolist() == [9, 0] * 8


def test_foreign_inputs_are_copied_at_submit_and_foreign_outputs_refused(worker):
    worker.init()
    n = 512
    host = np.full(n, 3.0, dtype=np.float32)  # plain numpy memory: not seen by the chips
    out = worker.create_buffer(n)

    def orch_fn(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(host).input(host).output_existing(out), cfg)
        host[:] = 100.0  # after submit: the copy was taken already

    worker.run(orch_fn)
    assert (out == 6.0).all()

    def write_foreign(orch, args, cfg):
        orch.submit_next_level(worker.add, pto.TaskArgs().input(out).input(out).output_existing(host), cfg)

    with pytest.raises(pto.SubmitError, match=r"tensor 2 \(output_existing\): the array is not pto memory"):
        worker.run(write_foreign)
    assert (host == 100.0).all()


def test_dtypes_are_never_converted(worker):
    worker.init()
    f64 = np.ones(64)  # float64: pto holds no such type
    out = worker.create_buffer(64)
    with pytest.raises(pto.SubmitError, match="dtype float64") as e:
        worker.run(lambda orch, a, c: orch.submit_next_level(worker.add, pto.TaskArgs().input(out).input(f64).output_existing(out), c))
    # Which argument: its index, tag, shape and dtype, and what to do.
    assert "tensor 1 (input, a 64 float64 array)" in str(e.value)
    assert "astype(np.float32)" in str(e.value)
    with pytest.raises(pto.WorkerError, match="dtype float64"):
        worker.create_buffer(8, np.float64)
    ints = worker.create_buffer(64, "int32")
    assert ints.dtype == np.int32
    for name in ["float16", "int8", "uint8", "int16", "uint16", "uint32", "int64", "uint64", "bool"]:
        assert worker.create_buffer(4, name).dtype == np.dtype(name)


def test_empty_uses_the_one_open_worker():
    with pto.Worker(level=3, chips=1, mode="in-process") as w:
        w.init()
        e = pto.empty((2, 3), "int16")
        assert e.shape == (2, 3) and e.dtype == np.int16 and (e == 0).all()
        with pto.Worker(level=3, chips=1, mode="in-process") as w2:
            w2.init()
            with pytest.raises(pto.WorkerError, match="pass worker="):
                pto.empty(4)
            assert pto.empty(4, worker=w2).shape == (4,)


def test_memory_outlives_the_worker_safely():
    w = pto.Worker(level=3, chips=1, mode="child-process")
    w.init()
    a = w.create_buffer(1024)
    a[:] = 1.5
    w.close()
    del w
    assert a.sum() == 1536.0, "the array keeps its mapping alive"
