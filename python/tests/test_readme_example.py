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
    # As the `pto run` table prints them: value (heap in K/M/G) and source letter per ring.
    assert "task_window=1024c,1024c,1024c,1024c heap=64Mc,64Mc,64Mc,64Mc" in attn
    assert "dep_pool=16384d,16384d,16384d,16384d" in attn
    assert "heap=4Mc,2Mc,1Mc,1Mc dep_pool=256c,256c,256c,256c" in small
    assert "heap=256Md,256Md,256Md,256Md" in defaults and "c," not in defaults
    reserved = [float(line.rsplit("reserved ", 1)[1].split()[0]) for line in lines]
    assert reserved[1] < reserved[0] < reserved[2]
