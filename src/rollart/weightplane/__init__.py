"""The weight plane: weight versions move peer to peer, trainer -> store -> a relay chain of inference workers,
in verified buckets over ZeroMQ zero-copy frames (or CUDA IPC on one node); the coordinator only names versions
and addresses. Its three sides live here: the trainer's (``source``), the store's (``store``: WeightStore),
each inference worker's (``receiver``: WeightReceiver), and the coordinator's (``sync``: WeightSync).

Design (RollArt §6.3 data movement, made peer to peer)::

    trainer (WeightSource) --frames--> WeightStore (WeightRelay) --frames--> w0 --> w1 --> ... (relay tree)
         \\__ CUDA IPC, same node ___________________________________________> wi  (no host copy)

* Every hop holds a ``BucketServer`` (ROUTER). A version is announced with its manifest and is servable
  bucket by bucket as it arrives, so a chain moves it as a pipeline: hop i receives bucket k while hop i-1
  receives bucket k+1. The store's egress is one model per version whatever the number of workers; with
  ``relay_fanout`` f each worker forwards to at most f children (f=1: a chain; depth grows as n / f, each
  hop adds about one bucket of latency; on a cluster each hop has its own NIC).
* ``pull_version`` (client) keeps a window of bucket requests in flight, checks each bucket's size and
  CRC-32, retries a lost or corrupt bucket from the next source (parent, then the store) and raises
  ``WeightTransferError`` after ``retries``; a worker installs a version only once all of it arrived.
* A worker restarted in place has no version: told the version and the store's address, it pulls it itself.
* An inference worker's side of all this is one ``WeightReceiver`` (``receiver``): it pulls, answers the
  coordinator's questions about a pull, hands complete versions to the engine and catches up with the store.
* Every socket binds where the run's actor system does (``net.PlaneNet``): 127.0.0.1 on one machine, else this
  node's routable IP with ZeroMQ CURVE and the run's keys.
* The coordinator holds no weights: it sends versions, addresses, suspend and resume (``sync``).

Below them: ``buckets`` (packed buckets and manifests), ``server`` (BucketServer), ``client`` (pull_version),
``frames`` (the wire's named frames), ``relay`` (WeightRelay, one hop), ``cuda`` (device staging, CUDA IPC),
``net`` (PlaneNet), ``config`` (WeightPlaneConfig), ``traffic`` (TCP bytes as the kernel counts them).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"WeightTransferError": "buckets", "bucketize": "buckets", "tensor_bytes": "buckets",
            "BucketClient": "client", "PullStats": "client", "pull_version": "client", "WeightRelay": "relay",
            "BucketServer": "server", "WeightSource": "source", "WeightPlaneConfig": "config",
            "PlaneNet": "net", "WeightReceiver": "receiver", "WeightStore": "store", "WeightSyncStats": "store",
            "WeightSync": "sync"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import on first use, so that reading ``WeightPlaneConfig`` imports neither torch nor zmq."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rollart.weightplane' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollart.weightplane.{_EXPORTS[name]}"), name)
