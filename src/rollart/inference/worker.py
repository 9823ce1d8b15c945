"""The inference worker: the actor that serves one engine (RollArt §6.1, Figure 8).

It composes three parts; its own code is the actor's surface (the typed messages it answers, its stats):

* an ``EngineLoop`` (``rollart.inference.engine_loop``) that alone owns the engine and applies every command
  (add, abort, update, suspend, resume) between two engine steps, stepping in a dedicated thread so this
  actor's event loop keeps answering calls (and heartbeats) while the engine computes;
* a ``WeightReceiver`` (``rollart.weightplane.receiver``), its side of the weight plane: weights arrive peer to
  peer, never through the coordinator; ``pull_weights(PullWeights)`` starts pulling a version in the
  background, ``update_weights(UpdateWeights)`` installs the complete version between two engine steps, and a
  worker restarted in place pulls the store's newest version itself (``catch_up``);
* the engine (any ``rollart.engine.protocol.Engine``), wrapped, with a ``speed`` config, in the SIMULATED
  ``rollart.sim.engine_speed.SimulatedSpeedEngine`` whose steps last the simulated hardware's step time, or,
  with ``speed.task_profiles``, in ``rollart.sim.engine_profiled.ProfiledSpeedEngine`` whose requests last what
  turns of the paper's tasks take on the simulated hardware.

``InferenceWorker`` is a plain class: tests drive it in-process; the actor runtime serves it in its own
process (``ActorSystem.spawn(InferenceWorker, ...)``), where cancelling a ``generate`` call cancels the
coroutine here, which aborts the request in the engine. Requests arrive typed and validated (the
LLMProxy validates them where they enter); the worker does not check them again.
"""
from __future__ import annotations

from typing import Any, Callable

from rollart.actors import handles
from rollart.engine.protocol import Engine
from rollart.hardware import SpeedModelConfig
from rollart.inference.engine_loop import EngineLoop
from rollart.loader import load
from rollart.messages import (AbortRequest, ForgetWeights, GenerateRequest, GetStats, GetVersion, PullWeights,
                              ReclaimKV, ReleaseKV, UpdateWeights, WaitWeights, WeightAddress, WeightEndpoint,
                              WeightsDigest)
from rollart.types import GenerationResult, WeightBucket
from rollart.weightplane.receiver import WeightReceiver

SIMULATED_SPEED = "rollart.sim.engine_speed:SimulatedSpeedEngine"
"""The Engine wrapper a ``speed`` config puts around the engine. Named, not imported: ``rollart.sim`` runs
product code inside its simulators, so it sits above the product and the product never imports it."""
PROFILED_SPEED = "rollart.sim.engine_profiled:ProfiledSpeedEngine"
"""... and the one a ``speed`` config with ``task_profiles`` puts around it (requests timed as the paper's tasks)."""


class InferenceWorker:
    """One engine behind a command inbox. All public methods are coroutines safe to call concurrently.

    Args:
        engine: the engine config (``EngineConfig`` or a dict of its fields; a dict crosses processes).
        backend: engine backend in ``rollart.engine.registry.ENGINES`` ("torch" or "vllm"); None takes
            the engine config's own ``backend`` field.
        name: this worker's name (reported in every result's ``worker`` field).
        hw_class: the hardware class it runs on ("H800", "H20", "cpu"...), for routing.
        speed: optional ``SpeedModelConfig`` (or dict): SIMULATED, each step lasts that hardware's step time.
        engine_obj: an already-built engine (tests); overrides ``engine`` / ``backend``.
        weight_store: the weight store's weight-plane address; at every start (a restart included) the worker
            asks it for its newest version and, when newer than its own, pulls and installs it before serving.
        link_bytes_per_s: > 0 EMULATES a slower link for the weights this worker pulls (``WeightReceiver``).
        weight_timeout_s, weight_retries: ``weights.timeout_s`` / ``weights.retries`` of the pulls it starts itself.
    """

    def __init__(self, engine: Any = None, *, backend: str | None = None, name: str = "worker",
                 hw_class: str = "cpu", speed: SpeedModelConfig | dict | None = None,
                 engine_obj: Engine | None = None, weight_store: str = "", link_bytes_per_s: float = 0.0,
                 weight_timeout_s: float = 30.0, weight_retries: int = 3) -> None:
        if engine_obj is None:
            if engine is None:
                raise ValueError("InferenceWorker needs an engine config (engine=...) or engine_obj")
            if backend is None:
                backend = engine.get("backend") if isinstance(engine, dict) else engine.backend
            from rollart.engine.registry import create_engine
            engine_obj = create_engine(backend or "torch", engine)
        self.simulated: Any = None
        """The simulated-speed engine around the engine (with a ``speed`` config), else None."""
        if speed is not None:
            speed = SpeedModelConfig(**speed) if isinstance(speed, dict) else speed
            path = PROFILED_SPEED if speed.task_profiles else SIMULATED_SPEED
            self.simulated = load(path, "simulated speed engine")(engine_obj, speed)
        self.engine: Engine = self.simulated or engine_obj
        self.hw_class = hw_class
        self.loop = EngineLoop(self.engine, name)
        self.weights = WeightReceiver(name, device=self.engine.weights_device, store=weight_store,
                                      link_bytes_per_s=link_bytes_per_s, timeout_s=weight_timeout_s,
                                      retries=weight_retries, version=lambda: self.engine.version,
                                      install=self.loop.install)

    role = "generate"
    """For rollart.distributed.Cluster: places it with the generation role's default hardware."""

    @property
    def name(self) -> str:
        return self.loop.name

    def rollart_bind(self, info: dict) -> dict:
        """Called by a rollart.distributed Cluster once started: adopt the name and hardware it bound us to."""
        self.loop.name = self.weights.name = info.get("name", self.name)
        self.hw_class = info.get("hw_class", self.hw_class)
        return {"name": self.name, "hw_class": self.hw_class}

    async def on_start(self) -> None:
        """Actor hook: start the loop as soon as the actor is up, holding the store's newest weights."""
        self.loop.start()
        if self.weights.store:
            await self.catch_up()

    async def on_stop(self) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop the loop, fail nothing silently: requests still in flight return finish_reason 'abort'."""
        await self.loop.close()
        await self.weights.close()

    # ---------------------------------------------------------------- requests
    @handles(GenerateRequest)
    async def generate(self, request: GenerateRequest) -> GenerationResult:
        """Generate for one request; returns the moment it finishes (finish_reason 'abort' if aborted).

        What the engine refuses raises ``InvalidRequestError`` here; cancelling this coroutine aborts the request.
        """
        return await self.loop.generate(request)

    @handles(AbortRequest)
    async def abort(self, request: AbortRequest) -> bool:
        """Abort a request; its ``generate`` returns finish_reason 'abort'. False if it was not in flight."""
        return self.loop.abort(request.request_id)

    async def suspend(self) -> None:
        """Pause stepping (requests and their KV stay; new ADDs queue up). Returns once paused."""
        await self.loop.suspend()

    async def resume(self) -> None:
        await self.loop.resume()

    @handles(ReleaseKV)
    async def release_kv(self, msg: ReleaseKV) -> int:
        """Abort what is in flight and free the engine's KV cache (one GPU shared with the trainer, which steps
        meanwhile); the bytes freed. Requests that arrive before ``reclaim_kv`` wait for it."""
        return await self.loop.release_kv()

    @handles(ReclaimKV)
    async def reclaim_kv(self, msg: ReclaimKV) -> int:
        """Allocate the KV cache again, empty; the bytes it holds."""
        return await self.loop.reclaim_kv()

    def add_finish_callback(self, fn: Callable[[str, GenerationResult], None]) -> None:
        """Register ``fn(request_id, result)``, called by the loop for every finished request."""
        self.loop.on_finish.append(fn)

    # ---------------------------------------------------------------- weights
    @handles(PullWeights)
    async def pull_weights(self, pull: PullWeights) -> str:
        """Start pulling ``pull.version`` in the background (rollout goes on); returns this worker's own
        weight-plane address, which its relay children pull from."""
        return await self.weights.pull(pull)

    @handles(WaitWeights)
    async def wait_weights(self, msg: WaitWeights) -> dict:
        """Wait until the started pull of ``msg.version`` is complete here; its stats (seconds, bytes, retries)."""
        return await self.weights.wait(msg.version)

    @handles(ForgetWeights)
    async def forget_weights(self, msg: ForgetWeights) -> list[int]:
        """Drop the weight versions >= ``msg.first`` this worker holds or pulls (the trainer went back to an
        older checkpoint: those numbers come again with other weights). The engine's installed weights stay."""
        return await self.weights.forget(msg.first)

    @handles(WeightAddress)
    async def weight_address(self, msg: WeightAddress) -> WeightEndpoint:
        """Where this worker serves weights, its node and whether its weights live on a GPU (for CUDA IPC)."""
        return await self.weights.address()

    @handles(UpdateWeights)
    async def update_weights(self, update: UpdateWeights) -> int:
        """Load new weights between two steps; requests in flight continue (their KV is recomputed).
        Returns the version now loaded. A version that cannot be pulled intact raises and nothing of it is
        installed."""
        return await self.weights.update(update)

    async def catch_up(self, timeout_s: float = 5.0) -> int:
        """Install the weight store's newest version when it is newer than the engine's (a worker restarted in
        place does this itself); returns the version held. See ``WeightReceiver.catch_up``."""
        return await self.weights.catch_up(timeout_s)

    async def install_weights(self, weights: WeightBucket, namespace: str, reuse_cached: bool = False) -> int:
        """Install a whole version as the weights of ``namespace`` (one job of a shared worker), between two
        steps: the engine keeps the other namespaces' cached prefixes and, with ``reuse_cached``, this one's;
        an engine without ``capabilities.prefix_namespaces`` drops its prefix cache as on any update."""
        return await self.loop.install(weights, namespace, reuse_cached)

    @handles(WeightsDigest)
    async def weights_digest(self, msg: WeightsDigest) -> dict[str, int]:
        """Name -> CRC-32 of every weight the engine holds now (to check a sync without moving weights)."""
        from rollart.weightplane.buckets import digest
        return await self.loop.in_engine_thread(digest, self.engine.named_weights())

    # ---------------------------------------------------------------- state
    @handles(GetVersion)
    async def get_version(self, msg: GetVersion) -> int:
        return self.engine.version

    async def ping(self) -> str:
        return self.name

    @handles(GetStats)
    async def get_stats(self, msg: GetStats) -> dict:
        return self.stats()

    async def engine_stats(self) -> dict:
        """The engine's own counters (``EngineStats``, its ``extra`` gauges merged in)."""
        stats = self.engine.stats()
        return {**{k: v for k, v in vars(stats).items() if k != "extra"}, **stats.extra}

    def stats(self) -> dict:
        """The loop's counters; with a simulated speed, engine_seconds without the simulated sleeps and the
        simulated seconds beside them."""
        c = dict(self.loop.counters, simulated_seconds=0.0, simulated_scaled_seconds=0.0)
        if self.simulated is not None:
            c.update(self.simulated.seconds())
        return dict(c, name=self.name, hw_class=self.hw_class, version=self.engine.version,
                    running=self.loop.running, outstanding_tokens=self.outstanding_tokens(),
                    suspended=self.loop.suspended, kv_released=self.loop.kv_released, last_weight_pull=dict(self.weights.last_pull),
                    prefix_hit_rate=c["cached_tokens"] / c["prompt_tokens"] if c["prompt_tokens"] else 0.0)

    def outstanding_tokens(self) -> int:
        """Upper bound of the work queued here: prompt + max new tokens of every request in flight."""
        return self.loop.outstanding_tokens()
