"""Ctrl-C as a user presses it: SIGINT to a real Python process inside ``w.run``; the run is
cancelled, KeyboardInterrupt propagates, and no child process outlives the interpreter."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import pto

    # As in conftest.py: a Python started with SIGINT ignored (the suite launched as a
    # background job) never sees Ctrl-C; a terminal's Python does.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def slow(args):
        time.sleep(0.5)

    with pto.Worker(level=3, chips=2, sub_workers=1, mode=sys.argv[1]) as w:
        w.register(pto.ChipCallable("elementwise_add"))
        s = w.register(slow)
        w.init()
        print("children", *w.child_pids(), flush=True)
        buf = w.create_buffer(8)

        def orch_fn(orch, args, cfg):
            for _ in range(20):
                orch.submit_sub(s, pto.TaskArgs().inout(buf))
            print("running", flush=True)

        try:
            w.run(orch_fn)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            report = w.run(lambda orch, args, cfg: orch.submit_sub(s))
            print("next run ok", report.tasks[0].ok, flush=True)
            raise
""")


@pytest.mark.parametrize("mode", ["in-process", "child-process"])
def test_sigint_cancels_the_run_and_the_interpreter_exits_cleanly(mode, tmp_path):
    script = tmp_path / "interrupt_me.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        children = [int(p) for p in proc.stdout.readline().split()[1:]]
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
    assert "interrupted" in out and "next run ok True" in out, (out, err)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert elapsed < 10, f"{elapsed:.1f} s from SIGINT to exit (20 tasks of 0.5 s were queued)"
    assert len(children) == (2 if mode == "child-process" else 0)
    deadline = time.monotonic() + 5
    for pid in children:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), f"child {pid} outlived the interpreter"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of an exited parent is reaped by init; treat "Z" as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
