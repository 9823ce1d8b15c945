"""Covers rollart.trainer.shutdown.exit_process: the process ends with the given code at once, its buffered
output flushed, without finalisation (no atexit handler, no wait for threads that are still running)."""
import os
import subprocess
import sys
from pathlib import Path

import rollart

SCRIPT = """
import atexit, sys, threading
from rollart.trainer.shutdown import exit_process
atexit.register(lambda: print("atexit ran", flush=True))
# a non-daemon thread that never ends: a normal exit would wait for it forever
threading.Thread(target=threading.Event().wait, name="never-ends").start()
sys.stdout.write("report written")  # no newline: still in the pipe's buffer
exit_process(3)
"""


def test_exit_process_flushes_and_skips_finalisation():
    src = str(Path(rollart.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe stays block-buffered: the flush is what is tested
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120)  # guards against a hang only: a normal exit would never return
    assert done.returncode == 3, done.stderr
    assert done.stdout == "report written", done.stdout
