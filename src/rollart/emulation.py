"""Emulated hardware for every role of a real run (``simulate_hardware=true``): what each role's step would take
on the paper's hardware for the paper's model, and the constants it is calibrated from, each with its source.

The real code runs underneath — coordinator, actors, ZeroMQ, buffer, envs, the small model's real tokens and real
learning — and each role sleeps the difference where its real compute is shorter than the emulated time:

* an inference worker's engine step lasts the roofline step time of the emulated model on its class
  (``rollart.hardware.SpeedModel``, RollArt Table 2), via ``rollart.sim.engine_speed``; with
  ``EmulationConfig.task_profiles`` a request instead lasts what a turn of the paper task it stands for
  (``PAPER_TASKS``) takes on an emulated engine of that class, via ``rollart.sim.engine_profiled``;
* a train step lasts ``6 · P · tokens`` FLOPs of the emulated model over ``trainer.speed.devices`` GPUs of its class
  at ``mfu`` (``TrainerSpeedConfig``; the batch's real token count): the run counts the step done only then, so
  the trainer process itself is configured alike for every run it serves;
* a weight pull lasts the emulated model's bytes over the emulated link: the real bytes go through the real weight
  plane at the rate that makes them take that long (``link_bytes_per_s``).

Every time is multiplied by ``sim_time_scale`` before sleeping. Where the real compute is longer than the scaled
emulated time (a slow CPU, a small time scale) the step lasts the real time: the run counts such steps and says so
in one line at its end, and a figure from such a run is not emulated timing. Every figure is SIMULATED timing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rollart.config import ConfigError
from rollart.hardware import HARDWARE, MODELS, model_shape

TABLE3_TCP = {"Qwen3-8B": (15.26, 6.911), "Qwen3-14B": (27.51, 14.437), "Qwen3-32B": (61.02, 29.649)}
"""RollArt Table 3: model size (GB) and seconds to move it from the training to the inference cluster over TCP
(200 Gb/s Ethernet, Mooncake): the cross-cluster link of §7.1, measured."""
TABLE3_RDMA = {"Qwen3-8B": (15.26, 5.466), "Qwen3-14B": (27.51, 5.817), "Qwen3-32B": (61.02, 9.442)}
"""RollArt Table 3: the same over RDMA (400 Gb/s InfiniBand), the intra-cluster fabric of §7.1."""
FIG3_STEP_SHARES = {"generation": 0.54, "training": 0.23, "env_reset": 0.15}
"""RollArt §3.1, Fig. 3: shares of a Qwen3-8B training step on 32 H800 GPUs (SWE-bench, batch 128, successful
iterations, 366 s on average); the rest is other overhead."""
FIG3_STEP_S = 366.0
"""RollArt Fig. 3: the average Qwen3-8B step those shares are of (s)."""
TABLE4 = {"Qwen3-8B": {"push": 32.4, "pull": 6.2}, "Qwen3-14B": {"push": 67.8, "pull": 16.3},
          "Qwen3-32B": {"push": 127.3, "pull": 29.7}}
"""RollArt Table 4 (s a version): the weight push, trainer -> Mooncake store over the cross-cluster TCP link, and
the accumulated pull, store -> inference workers (ROLLART exposed 1.4 / 5.1 / 9.6 s of the pulls: 67-78 % hidden
by ongoing rollout; a synchronous design waits for push + pull, 38.6 / 84.1 / 157.0 s)."""


@dataclass(frozen=True)
class TaskProfile:
    """Token profile of one agentic task, as an emulated engine times it (ranges are sampled uniformly per
    trajectory / turn)."""
    name: str
    prompt_tokens: int
    turns: tuple[int, int]
    obs_tokens: int
    """Tokens the environment adds per turn (observation / tool output)."""
    response_tokens: tuple[int, int]
    env_latency_s: float = 0.1
    max_context: int = 32768

    @property
    def mean_turns(self) -> float:
        return sum(self.turns) / 2

    @property
    def decode_per_prefill(self) -> float:
        """Tokens generated per prompt token computed in a trajectory of this profile (the ranges' means; with
        prefix caching each later turn prefills only what the environment added): high is decode-heavy."""
        turns = self.mean_turns
        return turns * sum(self.response_tokens) / 2 / (self.prompt_tokens + (turns - 1) * self.obs_tokens)


PAPER_TASKS = {p.name: p for p in (
    TaskProfile("frozenlake", 600, (20, 40), 512, (10, 40)),
    TaskProfile("webshop", 1500, (5, 30), 1200, (30, 150)),
    TaskProfile("math", 300, (1, 4), 100, (1000, 6000)),
    TaskProfile("game", 400, (1, 1), 0, (500, 3000)),
)}
"""RollArt's agentic tasks as token profiles, on Qwen3-8B/32K. Their turns are Table 1's (FrozenLake 20-100, here
20-40; WebShop 5-30; GEM-math < 5; GEM-game 1); the paper gives no token counts, so the prompt, observation and
answer lengths are this project's estimates, checked against what the paper measured of them: with these
profiles the roofline (RollArt Table 2) puts FrozenLake on 2 H800s at 0.57x its time on 6 H20s and GEM-math on the
H20s at 0.66-0.87x (Fig. 4: as low as 0.53x, and 0.49-0.79x; tools/bench/affinity.py)."""

TRAIN_MFU = 0.4
"""Model FLOPs utilization of a training step. The papers give none: an assumption (dense-model training on
Megatron commonly reaches 0.35-0.45), stated where it is used."""


def link_gb_s(model: str, fabric: str = "tcp") -> float:
    """The effective rate (GB/s) Table 3 measured for ``model`` over ``fabric`` (tcp | rdma); other shapes take the
    nearest measured one's rate."""
    table = {"tcp": TABLE3_TCP, "rdma": TABLE3_RDMA}[fabric]
    if model not in table:
        size = model_shape(model).weight_bytes / 1e9
        model = min(table, key=lambda m: abs(table[m][0] - size))
    gb, seconds = table[model]
    return gb / seconds


def paper_transfer_s(part: str, phase_s: float, phases: tuple[str, ...] = ("generation",)) -> float:
    """A Qwen3-8B weight ``part`` (push | pull) in the time frame of a workload whose ``phases`` of Fig. 3 (their
    shares of a step) last ``phase_s`` seconds a step: Table 4's figure keeps its share of Fig. 3's step. The
    paper's trajectories are far longer than a CPU workload's, so a transfer sized by the link alone would span
    many of its steps; sized so, it is as long against the step as the paper measured it."""
    share = sum(FIG3_STEP_SHARES[p] for p in phases)
    return phase_s * TABLE4["Qwen3-8B"][part] / (share * FIG3_STEP_S)


def paper_train_s(phase_s: float, phases: tuple[str, ...] = ("generation",)) -> float:
    """A train step in the same time frame: Fig. 3's training share against the share of ``phases``."""
    return phase_s * FIG3_STEP_SHARES["training"] / sum(FIG3_STEP_SHARES[p] for p in phases)


@dataclass(frozen=True)
class TrainerSpeedConfig:
    """A train step's emulated time: ``6 · n_params · tokens`` FLOPs over ``devices`` GPUs of ``hw_class`` at
    ``mfu``, times ``time_scale``."""
    hw_class: str = "H800"
    devices: int = 1
    model: str = "Qwen3-8B"
    mfu: float = TRAIN_MFU
    time_scale: float = 1.0
    token_scale: float = 1.0
    """Emulated tokens per real token (EmulationConfig.token_scale)."""

    def __post_init__(self) -> None:
        gpus = sorted(n for n, h in HARDWARE.items() if h.kind == "gpu")
        if self.hw_class not in gpus:
            raise ConfigError(f"emulation.trainer_hw_class={self.hw_class!r} is not a GPU class; use one of {gpus}")
        if self.devices < 1 or not 0 < self.mfu <= 1 or self.time_scale <= 0:
            raise ConfigError(f"emulation.trainer_devices={self.devices} must be >= 1, emulation.trainer_mfu="
                              f"{self.mfu} in (0, 1] and sim_time_scale={self.time_scale} > 0")

    def step_seconds(self, tokens: int) -> float:
        """Emulated seconds of a step over ``tokens`` tokens, already multiplied by ``time_scale``."""
        flops = 6.0 * model_shape(self.model).n_params * tokens * self.token_scale
        return flops / (self.devices * HARDWARE[self.hw_class].tflops * 1e12 * self.mfu) * self.time_scale


@dataclass
class EmulationConfig:
    """What a run with ``simulate_hardware=true`` emulates besides its inference workers' classes."""
    model: str = "Qwen3-8B"
    """The model whose time every role emulates (one of rollart.hardware.MODELS)."""
    trainer_hw_class: str = "H800"
    """The GPU class the trainer emulates ('' leaves the trainer at its real speed)."""
    trainer_devices: int = 1
    """How many trainer_hw_class GPUs one train step is spread over."""
    trainer_mfu: float = TRAIN_MFU
    """The trainer's model FLOPs utilization (assumed: the papers give none)."""
    token_scale: float = 1.0
    """Emulated tokens per real token, for every role: each real token of a prompt, an answer or a context stands
    for this many of the emulated model's (``SpeedModelConfig.token_scale``; the trainer's step counts them too)."""
    task_profiles: dict[str, str] = dataclasses.field(default_factory=dict)
    """Task name -> a paper task (``PAPER_TASKS``: frozenlake, webshop, math, game): that task's requests are timed as
    turns of the paper's task on the workers' emulated classes (``rollart.sim.engine_profiled``), whatever their
    real tokens. Empty: every engine step is timed from the real step's tokens (x ``token_scale``)."""
    task_turns: dict[str, int] = dataclasses.field(default_factory=dict)
    """Task name -> the turns a trajectory of that task takes here (its ``max_turns``), for a task in
    ``task_profiles`` whose turn count differs from the paper task's: each request then stands for the paper task's
    mean turns / this many of its turns (observation and answer lengths scaled alike), so that a trajectory carries
    a paper trajectory's work. A task not named: one request, one paper turn."""
    weight_link: str = "tcp"
    """The link weight pulls emulate, at Table 3's measured rate for the model (tcp: the 200 Gb/s cross-cluster
    Ethernet; rdma: 400 Gb/s InfiniBand; none: the real weight plane's speed). An explicit
    ``weight_link_bytes_per_s`` wins."""

    @classmethod
    def of(cls, value: "EmulationConfig | dict") -> "EmulationConfig":
        return cls(**value) if isinstance(value, dict) else value

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"emulation.model={self.model!r} is unknown; use one of {sorted(MODELS)}")
        if self.token_scale < 1:
            raise ConfigError(f"emulation.token_scale={self.token_scale} must be >= 1 (emulated tokens per real token)")
        if self.weight_link not in ("tcp", "rdma", "none"):
            raise ConfigError(f"emulation.weight_link={self.weight_link!r}: choose tcp, rdma or none")
        unknown = {t: p for t, p in self.task_profiles.items() if p not in PAPER_TASKS}
        if unknown:
            raise ConfigError(f"emulation.task_profiles={unknown}: no such paper task; use one of {sorted(PAPER_TASKS)}")
        bad = {t: n for t, n in self.task_turns.items()
               if t not in self.task_profiles or not isinstance(n, int) or isinstance(n, bool) or n < 1}
        if bad:
            raise ConfigError(f"emulation.task_turns={bad}: give each task of emulation.task_profiles its turns "
                              "here as an integer >= 1")

    def trainer_speed(self, time_scale: float) -> "TrainerSpeedConfig | None":
        if not self.trainer_hw_class:
            return None
        return TrainerSpeedConfig(self.trainer_hw_class, self.trainer_devices, self.model, self.trainer_mfu, time_scale,
                                  self.token_scale)


def train_delay(speed: TrainerSpeedConfig, tokens: int, real_s: float) -> tuple[float, dict[str, float]]:
    """What a train step of ``tokens`` tokens that took ``real_s`` real seconds lacks of its emulated time (the
    caller waits that long before the step counts as done), and the step's emulation metrics (``outran``: 1 when
    the real compute was the longer)."""
    emulated = speed.step_seconds(tokens)
    return max(0.0, emulated - real_s), {"system/train_emulated_s": emulated, "system/train_real_s": real_s,
                                         "system/train_outran": float(real_s > emulated)}


def describe(model: str, worker_classes: list[str], trainer: TrainerSpeedConfig | None, link: float,
             time_scale: float, token_scale: float = 1.0, push: float = 0.0,
             task_profiles: dict[str, str] | None = None, task_turns: dict[str, int] | None = None) -> str:
    """The one line a run with emulated hardware prints: what it emulates."""
    counts: dict[str, int] = {}
    for hw in worker_classes:
        counts[hw] = counts.get(hw, 0) + 1
    rollout = " + ".join(f"{n}×{hw}" for hw, n in counts.items())
    train = f"trainer {trainer.devices}×{trainer.hw_class} (MFU {trainer.mfu:g})" if trainer else "trainer real"
    pulls = f"weight link {link:.3g} GB/s" if link else "weight pulls at the real plane's speed"
    pulls += f", push link {push:.3g} GB/s" if push else ""
    tokens = f", {token_scale:g} tokens per real token" if token_scale != 1 else ""
    if task_profiles:
        turns = task_turns or {}
        tokens += ", requests timed as the paper's " + ", ".join(
            f"{t}={p}" + (f" ({turns[t]} turns as {PAPER_TASKS[p].mean_turns:g})" if t in turns else "")
            for t, p in task_profiles.items())
    return f"emulated: {model} on {rollout}, {train}, {pulls}{tokens}; time ×{time_scale:g} [SIMULATED timing]"
