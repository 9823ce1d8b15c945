"""Rollout: tasks played as trajectories, from the LLM proxy down to the envs, into the buffer the trainer draws
batches from.

``proxy`` (LLMProxy: generation routed to inference workers) with ``proxy_config``, ``routing`` (Router:
hardware affinity, fallbacks), ``admission`` (the suspend/resume gate), ``worker_slot`` / ``worker_health`` (the
proxy's view of each worker) and ``profiler`` (``hw_affinity=auto``); ``env_manager`` (EnvManager: one coroutine
per trajectory, TaskSpec), ``env_host`` / ``env_client`` (envs hosted on CPU processes), ``env_protocol``,
``env_faults`` (fault-injecting env wrapper), ``thread_pool``, ``chat`` (token-in/token-out chat format);
``group_scheduler`` (RolloutScheduler: GRPO groups, scoring each trajectory through ``rollart.rewards``),
``buffer`` (SampleBuffer: versioned, α-bounded); ``play`` and ``scripted`` (model-free play and stand-ins)."""
