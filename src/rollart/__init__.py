"""rollart: agentic RL training across disaggregated, heterogeneous hardware.

Sub-packages, one per plane or role:
  actors/       ZeroMQ actor runtime (transport, wire messages, heartbeats, restarts)
  distributed/  Worker / Cluster declarations, decorators, ResourceManager
  models/       the one transformer implementation shared by engine and trainer
  engine/       continuous-batching inference engine (torch) and the vLLM adapter
  rollout/      LLMProxy, EnvManager, RolloutScheduler, SampleBuffer
  trainer/      losses, torch / deepspeed trainers, weight store, checkpoints
  pipeline/     the coordinator: α-bounded asynchronous training loop
  rewards/      reward functions and the serverless reward endpoint
  actions/      action-level scheduling of external resources (ARL-Tangram)
  multiplex/    training / inference as shared services across jobs (PlexRL)
  planner/      heterogeneity-aware placement search (HetRL)
  sandbox/      isolated execution of untrusted commands
  hardware.py   the hardware catalogue (GPU classes, model shapes) and the roofline speed model
  sim/          SIMULATED paper-scale simulators for the benchmarks, never executed by a training run
"""

__version__ = "0.1.0"
