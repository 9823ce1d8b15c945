"""FrozenLake as a multi-turn text game: gymnasium's FrozenLake-v1 rendered as a text grid.

Observation: the map's rows, one per line, with the agent's cell shown as ``P`` (gymnasium's ANSI
colour codes stripped); optionally a line spelling the position out (``position r1c2``), which random
maps need for a tiny model to learn (ENVIRONMENT.md, calibration). Action: one letter L/D/R/U or the
words left/down/right/up, case-insensitive. Anything else is a no-op that costs ``invalid_penalty``:
without that penalty every early group scores 0 and GRPO has no signal. Reward 1 at the goal.

``random_start=True`` starts each episode on a frozen cell of the map (S or F) instead of S: the cell is
``seed % (number of such cells)``, so any that many consecutive seeds play every start once, which is how an
evaluation on a fixed map scores a fraction instead of one episode repeated (seed None: a random cell).
Prefill-heavy: many short turns whose prompt is the whole history.
"""
from __future__ import annotations

import re
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.toy_text.frozen_lake import MAPS, FrozenLakeEnv, generate_random_map

from envs.text_space import text_space
from rollart.rollout.env_protocol import EnvDefaults

ACTIONS = {"L": 0, "D": 1, "R": 2, "U": 3}
STEPS = {"L": (0, -1), "D": (1, 0), "R": (0, 1), "U": (-1, 0)}
"""(row, column) change of each move."""
WORDS = {"LEFT": "L", "DOWN": "D", "RIGHT": "R", "UP": "U"}
_HIGHLIGHT = re.compile(r"\x1b\[41m(.)\x1b\[0m")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

SYSTEM_PROMPT = "Move to G avoiding H. Answer with one letter: L, D, R or U."


def parse_action(text: str) -> int | None:
    """The FrozenLake action named by ``text`` (letter or word), or None if it names none."""
    word = text.strip().strip(".!").upper()
    word = WORDS.get(word, word)
    return ACTIONS.get(word)


def ansi_to_text(ansi: str) -> str:
    """gymnasium's ANSI rendering → plain grid rows with the highlighted (agent) cell shown as P."""
    marked = _ANSI.sub("", _HIGHLIGHT.sub("P", ansi))
    rows = [line for line in marked.splitlines() if line and not line.lstrip().startswith("(")]
    return "\n".join(rows)


class FrozenLakeText(EnvDefaults, gym.Env):
    """FrozenLake-v1 with text observations and text actions (see module docstring)."""

    metadata = {"render_modes": ["ansi"]}
    system_prompt = SYSTEM_PROMPT
    max_new_tokens = 4

    def __init__(self, is_slippery: bool = False, map_name: str = "4x4", desc: list[str] | None = None,
                 random_map: bool = False, map_size: int = 4, spell_position: bool | None = None,
                 random_start: bool = False,
                 invalid_penalty: float = 0.1, invalid_hint: bool = True, render_mode: str | None = None):
        if desc is None and not random_map and map_name not in MAPS:
            raise ValueError(f"unknown map_name {map_name!r}; use one of {sorted(MAPS)} or pass desc=[...]")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty}")
        self.is_slippery = is_slippery
        self.invalid_hint = invalid_hint
        self.random_map = random_map
        self.random_start = random_start
        self.map_size = map_size
        self.spell_position = random_map if spell_position is None else spell_position
        self.invalid_penalty = invalid_penalty
        self.render_mode = render_mode
        self._desc = list(desc) if desc is not None else (None if random_map else MAPS[map_name])
        self._lake = self._build(self._desc or generate_random_map(map_size, seed=0))
        self.observation_space = text_space(256)
        self.action_space = text_space(16)

    def _build(self, desc: list[str]) -> FrozenLakeEnv:
        return FrozenLakeEnv(render_mode="ansi", desc=desc, is_slippery=self.is_slippery)

    # --- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.random_map:  # the map is a function of the seed: a GRPO group shares it
            map_seed = int(self.np_random.integers(2**31))
            self._lake = self._build(generate_random_map(self.map_size, seed=map_seed))
        self._lake.reset(seed=int(self.np_random.integers(2**31)))
        if self.random_start:
            starts = self.start_cells()
            pick = seed % len(starts) if seed is not None else int(self.np_random.integers(len(starts)))
            self._lake.s = starts[pick]
        return self._observation(), self._info(invalid=False)

    def step(self, action: str):
        move = parse_action(action) if isinstance(action, str) else None
        if move is None:
            obs = self._observation()
            if self.invalid_hint:  # useful to a pretrained LLM; only extra tokens to a tiny model
                obs += "\nInvalid action. Answer with one letter: L, D, R or U."
            return obs, -self.invalid_penalty, False, False, self._info(invalid=True)
        _, reward, terminated, truncated, _ = self._lake.step(move)
        return self._observation(), float(reward), terminated, truncated, self._info(invalid=False)

    def render(self) -> str:
        return self._observation()

    @classmethod
    def task_instances(cls, map_name: str = "4x4", desc: list[str] | None = None, random_map: bool = False,
                       random_start: bool = False, is_slippery: bool = False, **_: Any) -> frozenset | None:
        """Every (map, start cell, slippery) episode these kwargs can play (None with random_map: not finite);
        held-out evaluation checks its tasks share none with training (rollart.pipeline.heldout)."""
        if random_map:
            return None
        rows = tuple(desc) if desc is not None else tuple(MAPS[map_name])
        flat = "".join(rows)
        cells = [i for i, c in enumerate(flat) if c in "SF"] if random_start else [flat.index("S")]
        return frozenset((rows, cell, is_slippery) for cell in cells)

    # --- helpers -------------------------------------------------------------------------------
    def start_cells(self) -> list[int]:
        """The states ``random_start`` may begin in: every S or F cell of the current map, row by row."""
        flat = self._lake.desc.flatten()
        return [i for i, cell in enumerate(flat) if cell in (b"S", b"F")]

    @property
    def position(self) -> tuple[int, int]:
        return divmod(int(self._lake.s), int(self._lake.ncol))

    def _cell(self) -> bytes:
        r, c = self.position
        return self._lake.desc[r, c]

    def _observation(self) -> str:
        text = ansi_to_text(self._lake.render())
        if self.spell_position:
            r, c = self.position
            text += f"\nposition r{r}c{c}"
        return text

    def _info(self, invalid: bool) -> dict:
        r, c = self.position
        return {"success": self._cell() == b"G", "invalid": invalid, "position": [r, c]}

    # --- model-free play (rollart.rollout.play) ------------------------------------------------
    def sample_action(self, rng: np.random.Generator) -> str:
        """A uniformly random move among those that leave the current cell: a move into the board's edge is a
        no-op the rules allow and no player would choose. Holes are not avoided (that would be the task)."""
        return str(rng.choice(self.moves_on_board()))

    def moves_on_board(self) -> list[str]:
        """The moves that do not run into the board's edge from the current cell."""
        r, c = self.position
        nrow, ncol = int(self._lake.nrow), int(self._lake.ncol)
        return [a for a, (dr, dc) in STEPS.items() if 0 <= r + dr < nrow and 0 <= c + dc < ncol]

    def scripted_action(self, observation: str) -> str:
        """Shortest safe path to G read off the observation grid (BFS); 'D' if none exists."""
        return shortest_path_action(observation)


def shortest_path_action(observation: str) -> str:
    rows = [line for line in observation.splitlines() if line and set(line) <= set("SFHGP")]
    cells = {(r, c): ch for r, line in enumerate(rows) for c, ch in enumerate(line)}
    start = next((rc for rc, ch in cells.items() if ch == "P"), None)
    if start is None:
        return "D"
    queue, first = deque([start]), {start: ""}
    while queue:
        here = queue.popleft()
        if cells[here] == "G":
            return first[here] or "D"
        for name, (dr, dc) in STEPS.items():
            nxt = (here[0] + dr, here[1] + dc)
            if nxt in cells and nxt not in first and cells[nxt] != "H":
                first[nxt] = first[here] or name
                queue.append(nxt)
    return "D"
