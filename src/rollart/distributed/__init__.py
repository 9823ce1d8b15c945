"""Where a run's actors start: the RollArt programming model's placement (§5.1–5.2). A ResourceManager holds
the run's hardware classes and devices; a Cluster places one role's workers on them and runs each as an actor,
as a child of the coordinator or (``cluster.backend=ray``, ``ray_backend``) on a Ray node of its class.

    rm = ResourceManager({"H800": 2, "H20": 6, "cpu": 8})
    gen = await Cluster(InferenceWorker, rm, n=4, placement=["H800", "H800", "H20", "H20"], system=system,
                        worker_args=(engine_config,))

Modules: ``resources`` (ResourceManager, Binding), ``cluster`` (Cluster), ``cluster_config`` (ClusterConfig:
``local`` or ``ray``), ``hardware`` (which class serves which role, and the fallbacks), ``plan_placements`` (a
planner's plan as worker placements), ``ray_backend`` / ``ray_host`` (the Ray backend and its per-actor host).
Requests to the workers are typed messages (``rollart.messages``); generation is routed by task to hardware
classes by the LLMProxy (``rollart.rollout.routing``, ``proxy.hw_affinity``), the hardware-affinity mapping of
RollArt §5.2, in one place.
"""
from rollart.distributed.cluster import Cluster, ClusterError
from rollart.distributed.resources import Binding, ResourceExhaustedError, ResourceManager

__all__ = ["Cluster", "ClusterError", "ResourceManager", "ResourceExhaustedError", "Binding"]
