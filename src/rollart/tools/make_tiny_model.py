"""Write a tiny random-init model with a locally trained tokenizer, in exactly Hugging Face format.

    python -m rollart.tools.make_tiny_model OUT [--arch qwen3|llama] [--hidden 128 --layers 4 \
        --heads 2 --kv-heads 2 --head-dim 64 --intermediate 384 --vocab 512 --seed 0]

OUT gets config.json, model.safetensors, tokenizer.json, tokenizer_config.json (with a ChatML chat
template), chat_template.jinja and generation_config.json — loadable by rollart.models, transformers and
vLLM (head_dim 64). The byte-level BPE tokenizer is trained in a second on a built-in corpus covering the
shipped environments' text (FrozenLake grids and actions, arithmetic, English instructions, Python), with
digits split one per token, so every single letter and digit is one token. Deterministic given --seed.
The default (~0.9M parameters) is what the quickstart trains from scratch on CPU.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from rollart.models import CausalLM, ModelConfig, save_model

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_ENGLISH = [
    "You are an agent playing FrozenLake. Reach the goal G without falling into a hole H.",
    "S is the start, F is frozen ice, H is a hole, G is the goal. Answer with one action.",
    "Actions: L = Left, D = Down, R = Right, U = Up. Reply with a single letter.",
    "Solve the math problem. Put the final answer after 'Answer:'. Think step by step.",
    "Write a Python function that returns the sum of a list of numbers.",
    "You can call the calculator tool with <tool>expression</tool> and read the result.",
    "The answer is correct. The answer is wrong, try again. Invalid action, try again.",
    "Move left, move down, move right, move up. You reached the goal! You fell into a hole.",
    "Fix the failing test in the repository. The test expects the function to return True.",
    "What is the value of x? Let us compute it carefully and check the result.",
]
_PYTHON = [
    "def add(a, b):\n    return a + b\n",
    "def is_even(n: int) -> bool:\n    return n % 2 == 0\n",
    "for i in range(10):\n    print(i)\n",
    "import math\n\nclass Solution:\n    def solve(self, nums):\n        total = 0\n        for x in nums:\n            total += x\n        return total\n",
    "if x is None:\n    raise ValueError(\"x must not be None\")\nelse:\n    result = [y * 2 for y in x]\n",
    "assert candidate([1, 2, 3]) == 6\nassert candidate([]) == 0\n",
    "while left < right:\n    mid = (left + right) // 2\n    if nums[mid] < target:\n        left = mid + 1\n",
]


def _grid(rng: random.Random, size: int) -> list[str]:
    rows = [[rng.choice("FFFH") for _ in range(size)] for _ in range(size)]
    rows[0][0], rows[-1][-1] = "S", "G"
    return ["".join(r) for r in rows]


def build_corpus(seed: int) -> list[str]:
    """A few hundred KB of text in the shapes the shipped envs produce (deterministic given seed)."""
    rng = random.Random(seed)
    texts = list(_ENGLISH) + list(_PYTHON)
    for _ in range(300):
        size = rng.choice([4, 4, 4, 8])
        grid = _grid(rng, size)
        r, c = rng.randrange(size), rng.randrange(size)
        marked = [list(row) for row in grid]
        mark = rng.choice(["P", "*", "A", "X"])
        marked[r][c] = mark
        board = "\n".join("".join(row) for row in marked)
        action = rng.choice("LDRU")
        word = {"L": "Left", "D": "Down", "R": "Right", "U": "Up"}[action]
        texts.append(f"{board}\nYou are at row {r}, column {c} (r{r}c{c}). Action: {action}")
        texts.append(f"{board}\nposition r{r}c{c}\n  ({word})")
        texts.append(f"<|im_start|>user\n{board}<|im_end|>\n<|im_start|>assistant\n{action}<|im_end|>\n")
        texts.append(f"Action {action} ({word}). The agent {mark} moved {word.lower()}.")
    for _ in range(400):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        val = {"+": a + b, "-": a - b, "*": a * b, "/": round(a / max(b, 1), 3)}[op]
        texts.append(f"What is {a} {op} {b}? {a} {op} {b} = {val}. Answer: {val}")
        texts.append(f"<tool>{a}{op}{b}</tool> result: {val}")
    for _ in range(60):
        texts.append(rng.choice(_ENGLISH) + " " + rng.choice(_PYTHON))
    return texts


def train_tokenizer(vocab_size: int, seed: int):
    """Byte-level BPE with one-digit pre-splitting, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(build_corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, chat_template=CHAT_TEMPLATE,
                                   model_max_length=2048, clean_up_tokenization_spaces=False)


def make_tiny_model(out: str | Path, arch: str = "qwen3", hidden: int = 128, layers: int = 4, heads: int = 2,
                    kv_heads: int = 2, head_dim: int = 64, intermediate: int = 384, vocab: int = 512,
                    max_positions: int = 2048, seed: int = 0, init_std: float = 0.02) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab, seed)
    tokenizer.save_pretrained(str(out))
    tk_cfg_path = out / "tokenizer_config.json"
    tk_cfg = json.loads(tk_cfg_path.read_text())
    tk_cfg["chat_template"] = CHAT_TEMPLATE  # readers that only look in tokenizer_config.json
    tk_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # a name transformers v4 and v5 both resolve
    tk_cfg_path.write_text(json.dumps(tk_cfg, indent=2) + "\n")
    if not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = ModelConfig(model_type=arch, vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, max_position_embeddings=max_positions, tie_word_embeddings=True,
                         eos_token_id=eos, extra={"pad_token_id": pad})
    model = CausalLM(config)
    model.init_weights(torch.Generator().manual_seed(seed), std=init_std)
    save_model(model, out)
    gen = {"eos_token_id": [eos, pad], "pad_token_id": pad, "do_sample": True, "temperature": 1.0,
           "top_p": 1.0, "top_k": 0}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="output folder")
    p.add_argument("--arch", choices=["qwen3", "llama", "qwen2"], default="qwen3")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64, help="keep 64 if vLLM must serve the model")
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--max-positions", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02, help="std of the random init of weight matrices")
    a = p.parse_args(argv)
    out = make_tiny_model(a.out, a.arch, a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.intermediate,
                          a.vocab, a.max_positions, a.seed, a.init_std)
    n = ModelConfig.from_pretrained(out).num_params()
    print(f"wrote {a.arch} model ({n / 1e6:.2f}M params) to {out}")


if __name__ == "__main__":
    main()
