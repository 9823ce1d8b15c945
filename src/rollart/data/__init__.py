"""Bring-your-own data: a file of prompts with answers becomes the run's tasks. ``rows`` reads it (Hugging Face
``datasets``, local files; columns mapped, common layouts recognised), ``split`` holds rows out for evaluation,
``tasks`` makes one task per ``data_source`` (``dataset_tasks``: played by ``rollart/Dataset-v0`` and scored by a
verifier of ``rollart.rewards.verifiers``)."""
