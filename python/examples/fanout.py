import pto

MiB = 1 << 20
with pto.Worker(level=3, chips=3, mode="child-process") as w:
    job = w.register(pto.ChipCallable("vector_example"))  # f = (a+b+1)(a+b+2) + (a+b)
    w.init()
    a, b = w.create_buffer(4096), w.create_buffer(4096)  # numpy arrays in shared memory
    a[:], b[:] = 1.0, 2.0
    outs = [w.create_buffer(4096) for _ in range(3)]
    sizing = {"attn": pto.RuntimeEnv(ring_heap=64 * MiB, ring_task_window=1024),
              "small": pto.RuntimeEnv(ring_heap=[4 * MiB, 2 * MiB, MiB, MiB], ring_task_window=64,
                                      ring_dep_pool=256),
              "defaults": pto.RuntimeEnv()}

    def orch_fn(orch, args, cfg):  # each chip job carries its own ring sizing
        for chip, (label, env) in enumerate(sizing.items()):
            task = pto.TaskArgs().input(a).input(b).output_existing(outs[chip]).label(label)
            orch.submit_next_level(job, task, cfg.derive(runtime_env=env), worker=chip)

    for t in w.run(orch_fn, pto.TaskArgs(), pto.CallConfig()).tasks:
        print(f"{t.label}: {t.sizing} reserved {t.reserved_bytes / MiB:.0f} MiB")
    assert all((out == 23.0).all() for out in outs)
