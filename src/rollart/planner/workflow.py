"""RL workflow spec: which models, which tasks, batch and sequence sizes (HetRL §2.1, §3.3).

PPO has four models (actor, critic, reference, reward) and six tasks: actor generation, reward /
reference / critic inference, actor / critic training. GRPO drops the critic (four tasks).
Both come in synchronous and asynchronous form (async overlaps generation with training).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rollart.config import ConfigError, apply_overrides
from rollart.hardware import MODELS, ModelShape, model_shape

from .topology import parse_yaml


TaskKind = Literal["gen", "inf", "train"]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: TaskKind
    role: str
    """Which model: actor, critic, reference or reward."""
    model: ModelShape

    @property
    def lm_head(self) -> bool:
        """Actor and reference produce token logits; critic and reward produce one scalar."""
        return self.role in ("actor", "reference")


@dataclass
class WorkflowConfig:
    """What to plan: the RL algorithm, model sizes and the per-step workload."""

    algorithm: Literal["ppo", "grpo"] = "ppo"
    """ppo: actor+critic+reference+reward, six tasks; grpo: no critic, four tasks."""
    mode: Literal["sync", "async"] = "sync"
    """async overlaps next-step generation with training (needs a second actor copy)."""
    model: str = "Qwen3-8B"
    """Actor (and reference) model shape, a preset of rollart.hardware.MODELS (any case)."""
    critic_model: str = ""
    """Critic preset; empty = same as model."""
    reward_model: str = ""
    """Reward model preset; empty = same as model."""
    prompts_per_step: int = 384
    """Global batch size in prompts (HetRL §5.1: 384)."""
    responses_per_prompt: int = 8
    """Responses sampled per prompt (HetRL §5.1: 8)."""
    seq_in: int = 1024
    """Maximum prompt length, tokens."""
    seq_out: int = 1024
    """Maximum response length, tokens."""
    micro_batch_size: int = 2
    """Sequences per micro-batch for inference and training tasks."""
    max_decode_batch: int = 256
    """Largest decoding batch of the serving engine (vLLM max_num_seqs); memory may cap it lower."""
    eta: float = 1.0
    """Task parallelism η for tasks without dependencies on *different* GPU groups (0 sequential, 1 parallel)."""
    recompute: bool = True
    """Activation recomputation in training (TP traffic 6× forward instead of 4×; less activation memory)."""
    usable_memory_fraction: float = 0.9
    """Share of each GPU's memory the plan may use (rest: CUDA context, fragmentation)."""
    load_balance: bool = True
    """Per-replica batch sizes by replica speed and layer split by stage speed (HetRL §4.2)."""

    def __post_init__(self) -> None:
        for f in ("prompts_per_step", "responses_per_prompt", "seq_in", "micro_batch_size",
                  "max_decode_batch"):
            if getattr(self, f) <= 0:
                raise ConfigError(f"{f} must be > 0, got {getattr(self, f)}")
        if self.seq_out < 0:
            raise ConfigError(f"seq_out must be >= 0, got {self.seq_out}")
        if not 0.0 <= self.eta <= 1.0:
            raise ConfigError(f"eta must be in [0, 1], got {self.eta}")
        if not 0.0 < self.usable_memory_fraction <= 1.0:
            raise ConfigError("usable_memory_fraction must be in (0, 1]")
        for f in ("model", "critic_model", "reward_model"):
            name = getattr(self, f)
            if name and not name.startswith("{") and name.lower() not in {m.lower() for m in MODELS}:
                raise ConfigError(f"{f}={name!r}: unknown model preset; known: {sorted(MODELS)} "
                                  "(or a JSON shape {\"layers\":..,\"hidden\":..,\"intermediate\":..})")


class Workflow:
    """A resolved workflow: config plus its task list."""

    def __init__(self, cfg: WorkflowConfig):
        self.cfg = cfg
        actor = _shape(cfg.model, "model")
        critic = _shape(cfg.critic_model, "critic_model") if cfg.critic_model else actor
        reward = _shape(cfg.reward_model, "reward_model") if cfg.reward_model else actor
        tasks = [TaskSpec("actor_gen", "gen", "actor", actor),
                 TaskSpec("reward_inf", "inf", "reward", reward),
                 TaskSpec("ref_inf", "inf", "reference", actor)]
        if cfg.algorithm == "ppo":
            tasks.append(TaskSpec("critic_inf", "inf", "critic", critic))
        tasks.append(TaskSpec("actor_train", "train", "actor", actor))
        if cfg.algorithm == "ppo":
            tasks.append(TaskSpec("critic_train", "train", "critic", critic))
        self.tasks: tuple[TaskSpec, ...] = tuple(tasks)
        self.by_name = {t.name: t for t in tasks}

    @property
    def samples(self) -> int:
        """Sequences per step: prompts × responses per prompt."""
        return self.cfg.prompts_per_step * self.cfg.responses_per_prompt

    @property
    def inference_tasks(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks if t.kind == "inf")

    @property
    def training_tasks(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tasks if t.kind == "train")

    def describe(self) -> str:
        c = self.cfg
        return (f"{c.algorithm.upper()}-{c.mode} {c.model}, {c.prompts_per_step}x{c.responses_per_prompt} "
                f"sequences of {c.seq_in}+{c.seq_out} tokens, tasks: "
                + ", ".join(t.name for t in self.tasks))


def _shape(name: str, field: str) -> ModelShape:
    if name.startswith("{"):
        try:
            spec = json.loads(name)
            return ModelShape(name=spec.pop("name", "custom"), **spec)
        except (ValueError, TypeError) as e:  # bad JSON, unknown or missing fields, sizes <= 0
            raise ConfigError(f"{field}: bad model shape {name!r} ({e})") from None
    return model_shape(name)


WORKFLOW_PRESETS = {
    "ppo": {}, "grpo": {"algorithm": "grpo"},
    "ppo-async": {"mode": "async"}, "grpo-async": {"algorithm": "grpo", "mode": "async"},
}


def load_workflow(source: str, overrides: list[str] | None = None) -> Workflow:
    """A preset name (ppo, grpo, ppo-async, grpo-async) or a YAML/JSON file of WorkflowConfig fields."""
    if source in WORKFLOW_PRESETS:
        fields = dict(WORKFLOW_PRESETS[source])
    else:
        path = Path(source)
        if not path.exists():
            raise ConfigError(f"workflow {source!r}: neither a preset ({sorted(WORKFLOW_PRESETS)}) "
                              "nor an existing YAML/JSON file")
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            fields = parse_yaml(text, path) or {}
        else:
            fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ConfigError(f"{source}: expected a mapping of WorkflowConfig fields")
        for k, v in list(fields.items()):
            if isinstance(v, dict):  # inline model shape
                fields[k] = json.dumps(v)
    known = {f.name for f in dataclasses.fields(WorkflowConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"workflow: unknown field(s) {unknown}; known: {sorted(known)}")
    cfg = WorkflowConfig(**fields)
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    return Workflow(cfg)
