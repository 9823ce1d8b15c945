"""Writes ``arith.jsonl``, the math dataset ``python -m recipes.grpo_math`` trains on by default.

    python -m recipes.data.make_arith            # rewrites recipes/data/arith.jsonl (deterministic: seed 0)

Arithmetic word problems with whole-number answers in the ``{"prompt", "answer", "data_source"}`` layout, four
tasks in one file (``data_source``): add, subtract, multiply (one step each) and two_step (a purchase or a gift
on top of a count). The sizes of the numbers set the difficulty; they are small enough that SmolLM2-135M-Instruct
answers part of them zero-shot (the recipe's first evaluation prints the measured rate), so GRPO has signal from
its first step.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("arith.jsonl")
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Julia", "Kofi", "Lena"]
ITEMS = ["apples", "books", "marbles", "stamps", "cookies", "pencils", "stickers", "shells"]


def add(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b = r.randint(2, 20), r.randint(2, 20)
    return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b


def subtract(r: random.Random, name: str, item: str) -> tuple[str, int]:
    b, left = r.randint(2, 15), r.randint(1, 15)
    return f"{name} has {b + left} {item} and gives away {b}. How many {item} does {name} have left?", left


def multiply(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b = r.randint(2, 9), r.randint(2, 9)
    return f"{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} buy?", a * b


def two_step(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b, c = r.randint(2, 20), r.randint(2, 5), r.randint(2, 5)
    if r.randrange(2) == 0:
        return (f"{name} has {a} {item}, then buys {b} bags with {c} {item} in each bag. "
                f"How many {item} does {name} have now?", a + b * c)
    d = r.randint(1, a)
    return (f"{name} has {a} {item}, gives away {d}, then gets {c} more. "
            f"How many {item} does {name} have now?", a - d + c)


KINDS = {"add": add, "subtract": subtract, "multiply": multiply, "two_step": two_step}


def rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` problems, the kinds in turn, each from ``seed`` (no two with the same prompt)."""
    r, out, seen = random.Random(seed), [], set()
    kinds = list(KINDS.items())
    while len(out) < n:
        source, make = kinds[len(out) % len(kinds)]
        prompt, answer = make(r, r.choice(NAMES), r.choice(ITEMS))
        if prompt not in seen:
            seen.add(prompt)
            out.append({"prompt": prompt, "answer": str(answer), "data_source": source})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows(args.rows, args.seed)))
    print(f"wrote {args.rows} rows to {args.out}")


if __name__ == "__main__":
    main()
