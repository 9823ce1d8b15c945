"""End a process that ran a distributed trainer without the interpreter's finalisation.

``trainer.close()`` waits for the other ranks and calls ``destroy_process_group()``, but that only drops
torch.distributed's own references to the process groups. DeepSpeed keeps them referenced (engine and
optimizer, the ``ds_process_group`` of every ZeRO-3 parameter, its module-level forward stack, hooks
held by autograd), so after ``close()`` the groups' C++ threads are still running: on the CPU two gloo
work threads per group, gloo's transport loop and, on rank 0, the TCPStore server thread. Their owners
are then destroyed, or not, while Python finalises, in whatever order garbage collection and the
scheduler give, while those threads may still be finishing work that needs the GIL. That unordered
teardown is what aborts a worker now and then after all its work is done:
``terminate called without an active exception``, exit status -6.

``exit_process`` flushes the standard streams and ends the process with ``os._exit``: no finalisation,
no C++ destructors, no atexit handlers run while those threads exist. The actor runtime ends every actor
process this way (``python -m rollart.actors.serve``); a script that drives a trainer over
torch.distributed itself ends with::

    trainer.close()
    exit_process(0)
"""
from __future__ import annotations

import os
import sys


def exit_process(code: int = 0) -> None:
    """Flush stdout/stderr and end the process now with ``code``: no atexit handlers, no finalisation.

    Call it last, after ``trainer.close()`` and once every file the process writes is closed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed, or replaced by an object without flush
            pass
    os._exit(code)
