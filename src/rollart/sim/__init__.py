"""SIMULATED: paper-scale simulators that reproduce the papers' figures on a CPU, used by the benchmarks
(tools/bench) and never executed by a training run. Product schedulers run inside them on simulated time.

``hwsim`` (agentic rollout on H800/H20 pools, timed by rollart.hardware.SpeedModel; RollArt Fig. 4, Fig. 11a);
``coding_actions``, ``mopd_actions`` and ``actions_baselines`` (action-level scheduling traces around the real
ElasticScheduler and its baselines; ARL-Tangram §6, RollArt §7.3 R3) on ``event_loop`` (simulated time),
recording ``act_result`` (SimResult); ``multiplex`` (trace replay of multi-job training-cluster policies around
the real Placer and HRRS; PlexRL §6.2–6.3); ``decode`` (an LLM stand-in with a fixed batched-decode capacity);
``batched`` (the batched-interaction baseline); ``judge`` (a deterministic reward-model cost for serverless
benchmarks); ``engine_speed`` (an Engine wrapper whose steps last the SpeedModel's time: the inference worker's
``simulate_hardware`` mode, the one part of ``sim`` a run may execute, and only when asked to).
"""
