"""The fault suite: ``python -m rollart.faults`` runs a short real training run (the FrozenLake quickstart's
pipeline, tiny, on CPU) under each fault and prints one measured figure per fault.

``cli`` (the command, fault selection), ``harness`` (Harness: drives a short run under a fault, Outcome),
``figures`` (Figure, the summary line), ``ledger`` (what entered the buffer against what was trained), the faults
``env_failures`` (env exceptions and hangs), ``kills`` (kill -9 of actor processes, env hosts included),
``reward_faults`` (a faulted serverless reward endpoint), ``corrupt_ckpt`` (a truncated checkpoint), ``disk_full``
(a checkpoint disk that fills up), ``malformed_frames`` (a rogue peer's flood, sent by ``frames``, and the frame
ledger) and ``sandbox_suite`` (hostile sandbox commands); ``procs`` finds and kills
actor processes, ``trainer_ledger`` and ``rewards`` are the trainer and reward function the runs use. Kept free of
heavy imports: reward-endpoint workers import ``rollart.faults.rewards``."""
