"""One serverless worker process: runs registered reward functions for the endpoint.

Protocol (one JSON object per line): first stdout ``{"ready": true}`` once imports are done; stdin ``{"id", "fn", "args", "kwargs", "fault"}``; stdout
``{"id", "ok", "result" | "error"}`` (an error from the injected "raise" fault also carries
``"retryable": true``: it stands for a transient failure, while a function's own exception is final). The real stdout is kept for the protocol and ``print`` in user
functions goes to stderr. ``fault`` is the endpoint's test-only fault injection: "raise", "crash"
(the process dies mid-call) or "hang".
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

from rollart.rewards.registry import FunctionRegistry


def main(argv: list[str]) -> None:
    specs = [s for s in argv[argv.index("--functions") + 1].split(",") if s]
    registry = FunctionRegistry(specs)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # user prints must not corrupt the protocol
    out.write(json.dumps({"ready": True}) + "\n")  # imports done: call timeouts start from here
    for line in sys.stdin:
        msg = json.loads(line)
        fault = msg.get("fault")
        if fault == "crash":
            os._exit(17)
        if fault == "hang":
            time.sleep(3600)
        try:
            if fault == "raise":
                raise RuntimeError("injected fault")
            result = registry.get(msg["fn"])(*msg["args"], **msg["kwargs"])
            reply = {"id": msg["id"], "ok": True, "result": result}
            text = json.dumps(reply)
        except Exception as e:  # the function's failure is this call's answer, not the worker's end
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            text = json.dumps({"id": msg["id"], "ok": False, "error": f"{msg.get('fn')}: {detail}",
                               "retryable": fault == "raise"})
        out.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv)
