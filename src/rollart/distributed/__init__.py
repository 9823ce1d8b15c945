"""How a run starts its workers (inference, trainer, weight store): the RollArt programming model (§5).

A ResourceManager holds the run's hardware classes and devices; a Cluster places a worker class on them
and runs each worker as an actor; ``@register`` / ``@hw_mapping`` say how calls dispatch.

    import rollart.distributed as rdist

    class MyTrain(rdist.TrainWorker):
        @rdist.register(mode="execute_all")
        def compute_gradients(self, batch): ...

    class HeteroGen(rdist.GenerateWorker):
        @rdist.hw_mapping(hw_affinity={"FrozenLake": "H800", "default": "H20"})
        async def generate(self, prompt, task="default"): ...

    rm = rdist.ResourceManager({"H800": 8, "H20": 24, "cpu": 64, "serverless": "http://host:8080"})
    gen = await rdist.Cluster(HeteroGen, rm, n=4, system=system)
    await gen.generate(prompt, task="FrozenLake")
"""
from rollart.distributed.cluster import Cluster, ClusterError
from rollart.distributed.decorators import hw_mapping, register, register_serverless
from rollart.distributed.resources import Binding, ResourceExhaustedError, ResourceManager
from rollart.distributed.serverless import ServerlessClient, ServerlessError
from rollart.distributed.worker import (ActorGenCls, ActorTrainCls, EnvironmentCls, EnvWorker, GenerateWorker,
                                        RewardCls, RewardWorker, TrainWorker, Worker)

__all__ = ["Cluster", "ClusterError", "register", "hw_mapping", "register_serverless", "ResourceManager",
           "ResourceExhaustedError", "Binding", "ServerlessClient", "ServerlessError",
           "Worker", "TrainWorker", "GenerateWorker", "RewardWorker", "EnvWorker", "ActorTrainCls",
           "ActorGenCls", "RewardCls", "EnvironmentCls"]
