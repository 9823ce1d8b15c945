"""Action-level scheduling of external resources (ARL-Tangram): tool, env and reward calls run as actions over
CPU, GPU-service and API-quota pools. Start at :class:`rollart.actions.runtime.ActionScheduler`.

``action`` (Action: one call as a vector cost, ``amdahl`` elasticity), ``queue`` (ActionQueue, FCFS),
``elastic`` (ElasticScheduler, Algorithms 1-2, clock-injected), ``dp`` (DPArrange), the resource managers
``basic`` (CountPool, QuotaPool), ``cpu`` (CpuManager, allocate-on-execution), ``gpu`` (GpuPool, DeviceCache,
evict-on-execution) and ``services`` (ServiceManager: a run's GPU services); ``runtime`` (ActionScheduler, the
asyncio front rollout code calls), ``adapter`` (env and reward calls as actions), ``config`` (ActionsConfig),
``run`` (RunActions: the scheduler of one training run), ``static`` (StaticSlotRunner, the static baseline).
"""
