"""The quick exit (fl_runtime/process_exit.py) keeps what a normal exit guarantees: garbage in reference cycles is
still finalised (a buffered file in a cycle is flushed and closed), the other exit handlers still run, and the
frozen objects are not collected, so nothing the process built is torn down half-way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROGRAM = """
import atexit, sys
import site_agent  # installs the quick exit, as every job process and CLI does
atexit.register(lambda: open(sys.argv[2], "w").write("other handler ran"))

class Cycle:
    def __init__(self, path):
        self.me, self.file = self, open(path, "w", buffering=1 << 20)  # a buffer the exit must flush
    def __del__(self):
        self.file.write("finalised")
        self.file.close()

Cycle(sys.argv[1]).file.write("written, ")  # unreachable at once, kept alive only by its own cycle
"""


def test_quick_exit_still_finalises_cyclic_garbage_and_runs_the_other_handlers(tmp_path: Path):
    cycle, handler = tmp_path / "cycle.txt", tmp_path / "handler.txt"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(cycle), str(handler)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert cycle.read_text() == "written, finalised"
    assert handler.read_text() == "other handler ran"


def test_the_exit_handler_is_installed_once_by_both_sides_and_again_by_hand():
    program = ("import atexit, gc, fl_runtime.process_exit as q, site_agent, server_app; q.install(); "
               "freeze, calls = gc.freeze, []; gc.freeze = lambda: calls.append(1) or freeze(); "
               "atexit._run_exitfuncs(); print(len(calls), gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["1", "True"]
