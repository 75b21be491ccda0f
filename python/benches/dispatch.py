"""Per-task cost of driving pto from Python (BENCHMARKS.md, "Python bindings").

Runs of k tasks, k in (64, 1024), five runs each; the marginal cost per task is the slope
between the medians. Sub tasks call a Python no-op (the GIL is taken once per task); chip
tasks run the empty chip callable `bench.empty_chip`. Compare with `pto bench dispatch`, the
same tasks submitted from Rust, measured in the same session.

    python python/benches/dispatch.py
"""

import statistics
import time

import pto


def per_run(w, submit_k, k, reps=5):
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        w.run(lambda orch, args, cfg: submit_k(orch, k))
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def marginal_us(w, submit_k):
    per_run(w, submit_k, 64, reps=2)  # warm up
    small, big = per_run(w, submit_k, 64), per_run(w, submit_k, 1024)
    return (big - small) / (1024 - 64) * 1e6, small * 1e6


def main():
    print(f"{'mode':14} {'task':5} {'marginal µs/task':>17} {'run of 64 µs':>13}")
    for mode in ("in-process", "child-process"):
        with pto.Worker(level=3, chips=1, sub_workers=1, mode=mode) as w:
            chip = w.register(pto.ChipCallable("bench.empty_chip"))
            sub = w.register(pto.SubCallable(lambda args: None, name="noop"))
            w.init()
            empty = pto.TaskArgs()

            def subs(orch, k):
                for _ in range(k):
                    orch.submit_sub(sub, empty)

            def chips(orch, k):
                for _ in range(k):
                    orch.submit_next_level(chip, empty)

            for name, submit_k in (("sub", subs), ("chip", chips)):
                m, run64 = marginal_us(w, submit_k)
                print(f"{mode:14} {name:5} {m:17.1f} {run64:13.0f}")


if __name__ == "__main__":
    main()
