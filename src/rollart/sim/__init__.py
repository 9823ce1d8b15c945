"""SIMULATED: paper-scale simulators that reproduce the papers' figures on a CPU, used by the benchmarks
(tools/bench) and never executed by a training run. Product schedulers run inside them on simulated time.

``hwsim`` (agentic rollout on H800/H20 pools, timed by rollart.hardware.SpeedModel; RollArt Fig. 4,
Fig. 11a), ``actions`` and ``actions_baselines`` (action-level scheduling traces around the real
ElasticScheduler and its baselines; ARL-Tangram §6, RollArt §7.3 R3), ``multiplex`` (trace replay of
multi-job training-cluster policies around the real Placer and HRRS; PlexRL §6.2–6.3), ``decode`` (an LLM
stand-in with a fixed batched-decode capacity, so extra concurrent trajectories cost generation time).
"""
