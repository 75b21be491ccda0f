"""The README's Python script (python/examples/fanout.py, which the README test checks the
README shows whole) runs and prints three sizings with their sources."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "fanout.py")


def test_the_readme_script_fans_out_three_sizings():
    done = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["attn", "small", "defaults"]
    attn, small, defaults = lines
    assert "heap=[67108864(call_config)" in attn and "task_window=[1024(call_config)" in attn
    assert "dep_pool=[16384(default)" in attn
    assert "heap=[4194304(call_config), 2097152(call_config), 1048576(call_config)" in small
    assert "call_config" not in defaults and "heap=[268435456(default)" in defaults
    reserved = [float(line.rsplit("reserved ", 1)[1].split()[0]) for line in lines]
    assert reserved[1] < reserved[0] < reserved[2]
