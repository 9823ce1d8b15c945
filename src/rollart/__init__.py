"""rollart: agentic RL training across disaggregated, heterogeneous hardware.

Sub-packages, one per plane or role:
  pipeline/     a training run: its config and the Coordinator whose loop drives rollout, rewards and training
  rollout/      the LLMProxy, env hosts and managers, the GRPO group scheduler and the sample buffer
  inference/    the inference worker actor around one engine, and prefill/decode disaggregation
  engine/       continuous-batching inference engines (torch, paged KV cache) and the vLLM adapter
  models/       the one transformer implementation shared by engine and trainer
  trainer/      RL losses and the train step, torch / DeepSpeed backends, checkpoints, the trainer actor
  weightplane/  weight versions moved peer to peer: trainer -> weight store -> inference workers
  rewards/      scoring trajectories: reward dispatch, rule and model rewards, the serverless reward endpoint
  actors/       the ZeroMQ actor runtime (transport, wire messages, heartbeats, restarts)
  distributed/  where a run's actors start: ResourceManager, Cluster, the Ray backend, plan placements
  gateway/      an OpenAI-compatible server on the LLMProxy, so existing agents train as trajectories
  actions/      action-level scheduling of external resources (ARL-Tangram)
  multiplex/    training / inference as shared services across jobs (PlexRL)
  sandbox/      isolated execution of untrusted commands
  monitor/      tensorboard metrics and the progress line
  faults/       the fault suite: short real runs under injected faults (python -m rollart.faults)
  tools/        a model to run with, offline: a tiny random one, SmolLM2, the format warm-up
  planner/      SIMULATED heterogeneity-aware placement search (HetRL), run offline
  sim/          SIMULATED paper-scale simulators for the benchmarks, never executed by a training run

Modules every plane shares: ``config`` (dataclass configs, command-line overrides), ``types`` (the data
vocabulary), ``messages`` (the training path's typed actor requests), ``versions`` (policy staleness), ``loader``
(``"module:attr"`` strings), ``devices`` (device and precision), ``cpus`` (core pinning), ``cpu_features`` (what
this CPU runs), ``hardware`` (the hardware catalogue and the roofline speed model).
"""

__version__ = "0.1.0"
