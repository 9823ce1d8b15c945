"""Make ZeroMQ CURVE keys for a rollart coordinator and the actors that join it from other hosts.

    python tools/curve_keys.py keys/             # server + one client keypair, client authorized
    python tools/curve_keys.py keys/ --client h2  # add (and authorize) another client keypair

Layout (what rollart.actors.curve reads):
    keys/server.key, keys/server.key_secret     coordinator keypair (keep server.key_secret there)
    keys/weights.key, keys/weights.key_secret   weight-plane servers' keypair (give it to actor hosts)
    keys/client.key, keys/client.key_secret     default actor keypair
    keys/authorized/<name>.key                  public keys the coordinator accepts

Coordinator: ``ActorSystem(bind="tcp://0.0.0.0:5555", curve_dir="keys")``. Remote actor host: copy
server.key and its client keypair (as client.key / client.key_secret) into a directory and run
``python -m rollart.actors.serve --connect tcp://COORD:5555 --curve-dir DIR --cls ... --name ...``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

import zmq.auth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", help="directory to write keys into (created if missing)")
    p.add_argument("--client", default="client", help="name of the client keypair to create")
    p.add_argument("--force", action="store_true", help="overwrite an existing server keypair")
    args = p.parse_args(argv)
    os.makedirs(os.path.join(args.outdir, "authorized"), exist_ok=True)
    server_secret = os.path.join(args.outdir, "server.key_secret")
    if os.path.exists(server_secret) and not args.force:
        print(f"keeping the existing server keypair in {args.outdir} (use --force to replace it)")
    else:
        for pair in ("server", "weights"):  # the coordinator's, and the weight plane's servers'
            zmq.auth.create_certificates(args.outdir, pair)
    if args.client != "client" and not args.client.isidentifier():
        print(f"--client must be a simple name, got {args.client!r}", file=sys.stderr)
        return 2
    public, secret = zmq.auth.create_certificates(args.outdir, args.client)
    shutil.copy(public, os.path.join(args.outdir, "authorized", f"{args.client}.key"))
    os.chmod(secret, 0o600)
    os.chmod(server_secret, 0o600)
    print(f"wrote {args.outdir}/server.key(_secret), {os.path.basename(public)}(_secret); "
          f"authorized {args.client}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
