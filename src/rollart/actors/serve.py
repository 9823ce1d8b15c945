"""Serve one actor class in this process, connected to a coordinator.

The coordinator runs this for every process actor; run it by hand to join an actor from another host::

    python -m rollart.actors.serve --connect tcp://COORDINATOR:PORT --cls envs.frozenlake:EnvWorker \\
        --name env-7 --kwargs '{"seed": 7}' --curve-dir keys/

then ``await system.wait_for_actor("env-7")`` on the coordinator. With ``--curve-dir`` (the directory
made by ``python tools/curve_keys.py DIR``) the connection is CURVE-authenticated and encrypted; the
coordinator requires that for non-loopback endpoints.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import sys

import zmq

from rollart.actors.heartbeat import HeartbeatThread
from rollart.cpus import pin_from_env
from rollart.actors.server import ActorServer, set_torch_threads


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rollart.actors.serve", description=__doc__.split("\n")[0])
    p.add_argument("--connect", required=True, help="coordinator endpoint, e.g. tcp://10.0.0.5:5555")
    p.add_argument("--cls", required=True, help="actor class as package.module:ClassName")
    p.add_argument("--name", required=True, help="actor name (unique in the coordinator)")
    p.add_argument("--identity", default="", help="socket identity (set by the coordinator for its children)")
    p.add_argument("--args", default="[]", help="JSON list of constructor args (joining actors only)")
    p.add_argument("--kwargs", default="{}", help="JSON object of constructor kwargs (joining actors only)")
    p.add_argument("--heartbeat-interval", type=float, default=0.5)
    p.add_argument("--coordinator-timeout", type=float, default=30.0,
                   help="exit if the coordinator does not answer heartbeats for this long")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (0 = torch default)")
    p.add_argument("--curve-dir", default=None, help="CURVE key directory (tools/curve_keys.py)")
    p.add_argument("--parent-pid", type=int, default=0, help="die with this parent process (local children)")
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def _die_with_parent(parent_pid: int) -> None:
    """Linux: get SIGKILL when the coordinator process dies, so no actor outlives it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(75)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s {args.name} %(levelname)s %(message)s")
    if args.parent_pid:
        _die_with_parent(args.parent_pid)
    pin_from_env()  # before torch starts its thread pool
    if args.torch_threads > 0:  # read by torch when it is first imported (by the actor class or a tensor)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, str(args.torch_threads))
        set_torch_threads(args.torch_threads)  # in case something imported torch already
    try:
        offer_args, offer_kwargs = json.loads(args.args), json.loads(args.kwargs)
    except json.JSONDecodeError as e:
        print(f"--args/--kwargs must be JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(offer_args, list) or not isinstance(offer_kwargs, dict):
        print("--args must be a JSON list and --kwargs a JSON object", file=sys.stderr)
        return 2
    identity = (args.identity or f"{args.name}#{secrets.token_hex(4)}").encode()
    from rollart.actors.curve import COORDINATOR_VAR, CURVE_DIR_VAR

    os.environ[COORDINATOR_VAR] = args.connect  # for the sockets the actor opens itself (weight plane)
    if args.curve_dir:
        os.environ[CURVE_DIR_VAR] = os.path.abspath(args.curve_dir)
    ctx = zmq.Context()
    configure = None
    if args.curve_dir:
        from rollart.actors.curve import client_configurator

        configure = client_configurator(args.curve_dir)
    heartbeat = HeartbeatThread(ctx, args.connect, identity, args.heartbeat_interval, args.coordinator_timeout,
                                configure_socket=configure)

    def on_init() -> None:  # the coordinator accepted us: start heartbeats
        heartbeat.start()

    server = ActorServer(ctx, args.connect, args.name, args.cls, identity, offer_args=offer_args,
                         offer_kwargs=offer_kwargs, configure_socket=configure, on_init=on_init,
                         init_timeout=args.coordinator_timeout)
    try:
        rc = asyncio.run(server.run())
    except KeyboardInterrupt:
        rc = 130
    heartbeat.stop()
    if heartbeat.is_alive():
        heartbeat.join(timeout=2 * args.heartbeat_interval + 1)
    ctx.destroy(linger=0)
    return rc


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (torch's can take seconds); sockets are already closed
