"""Format warm-up: a fresh tiny model learns to answer FrozenLake with a valid letter, without a strong preference
for any (a prior, not a policy), and given the quickstart's steps it learns which moves its cell allows (it reads its
position); deterministic given the seed; an env without sample_action is refused by name."""
import gymnasium as gym
import pytest
import torch

from rollart.models import load_model, load_tokenizer
from rollart.rollout.chat import ChatFormat
from rollart.rollout.env_manager import TaskSpec
from rollart.tools.format_warmup import WarmupError, format_warmup
from rollart.tools.make_tiny_model import make_tiny_model

import envs  # noqa: F401  (registers rollart/FrozenLake-v0)

LAKE = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", max_new_tokens=1, max_turns=12,
                env_kwargs={"invalid_hint": False, "random_start": True, "spell_position": True})
LETTERS = "LDRU"


def small_model(path, seed=0):
    return make_tiny_model(path, hidden=64, layers=2, intermediate=128, seed=seed)


def answer_probs(model_dir) -> torch.Tensor:
    """(11 start cells, 4 letters): the model's probability of each letter as its first answer."""
    tok = load_tokenizer(model_dir)
    model = load_model(model_dir).eval()
    env = gym.make(LAKE.env_id, **LAKE.env_kwargs).unwrapped
    chat = ChatFormat(tok, env.system_prompt)
    ids = [chat.encode(a)[0] for a in LETTERS]
    rows = []
    for cell in range(11):
        obs, _ = env.reset(seed=cell)
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([chat.first_prompt(obs)]))[0, -1].float(), -1)
        rows.append(p[ids])
    return torch.stack(rows)


def test_warmup_teaches_valid_answers_with_no_preference(tmp_path):
    folder = make_tiny_model(tmp_path / "m", seed=0)  # the quickstart's model
    before = answer_probs(folder)
    result = format_warmup(folder, [LAKE], steps=40, seed=0)
    after = answer_probs(folder)
    assert before.sum(-1).max() < 0.1  # random init: the letters are a few of ~500 tokens
    assert after.sum(-1).min() > 0.8, after  # the format: nearly all mass on a valid letter, in every start cell
    share = after / after.sum(-1, keepdim=True)
    assert share.min() > 0.1 and share.max() < 0.45, share  # no policy: the four letters about evenly
    assert result.last_loss < result.first_loss and result.last_loss < 1.6  # ln 4 = 1.39 is the floor


@pytest.mark.slow
def test_warmup_of_the_quickstart_teaches_which_moves_each_cell_allows(tmp_path):
    """The random mover never runs into the board's edge, so at the quickstart's warmup_steps the model must read its
    position to match it: the move off the board gets little mass on the top and bottom rows, every move some inside.
    (With all four letters as the prior it learned one distribution for every cell, and RL on seed 1 then settled on
    an open-loop policy.)"""
    folder = make_tiny_model(tmp_path / "m", seed=0)
    format_warmup(folder, [LAKE], steps=200, seed=0)
    share = answer_probs(folder)
    share = share / share.sum(-1, keepdim=True)
    top, bottom, inside = [0, 1, 2, 3], [9, 10], [5, 8]  # start cells by seed: r0c0..r0c3, r3c1, r3c2; r1c2, r2c2
    assert share[top, LETTERS.index("U")].max() < 0.1, share
    assert share[bottom, LETTERS.index("D")].max() < 0.1, share
    assert share[inside].min() > 0.12, share


def test_warmup_is_deterministic(tmp_path):
    a, b = small_model(tmp_path / "a"), small_model(tmp_path / "b")
    format_warmup(a, [LAKE], steps=3, seed=7)
    format_warmup(b, [LAKE], steps=3, seed=7)
    wa, wb = load_model(a).state_dict(), load_model(b).state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


class NoSampler(gym.Env):
    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(1)

    def reset(self, *, seed=None, options=None):
        return "hello", {}


gym.register("formatwarmup/NoSampler-v0", entry_point=NoSampler)


def test_env_without_sample_action_is_named(tmp_path):
    folder = small_model(tmp_path / "m")
    task = TaskSpec(name="NoSampler", env_id="formatwarmup/NoSampler-v0")
    with pytest.raises(WarmupError, match="needs NoSampler to define sample_action"):
        format_warmup(folder, [task], steps=1)


def test_pipeline_builds_the_warmed_model_once(tmp_path):
    from rollart.pipeline import PipelineConfig
    from rollart.pipeline.prepare import ensure_model
    cfg = PipelineConfig(logdir=str(tmp_path), run_name="warm", warmup_steps=2)
    folder = ensure_model(cfg, [LAKE])
    first = load_model(folder).state_dict()
    cold = make_tiny_model(tmp_path / "cold", seed=cfg.seed)
    assert any(not torch.equal(first[k], v) for k, v in load_model(cold).state_dict().items())  # it was trained
    assert ensure_model(cfg, [LAKE]) == folder  # a second call (a resumed run) reuses it
    assert all(torch.equal(first[k], v) for k, v in load_model(folder).state_dict().items())
    assert not (tmp_path / "warm" / "init_model.building").exists()
    assert '"steps": 2' in (tmp_path / "warm" / "init_model" / "warmup.json").read_text()  # how it was made
