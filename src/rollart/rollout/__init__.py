"""Rollout: tasks played as trajectories — the LLM proxy routing generation to inference workers, env managers,
the GRPO group scheduler, reward dispatch and the versioned sample buffer the trainer draws batches from."""
