"""SWE environment: sandboxed small repositories with real bugs, tool calls, hidden-test reward."""

ENV_ID = "rollart/SWE-v0"
ENTRY_POINT = "envs.swe.env:SWEEnv"


def register() -> None:
    """Register ``rollart/SWE-v0`` with gymnasium (idempotent)."""
    import gymnasium as gym

    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=ENTRY_POINT)
