"""Action-level scheduling of external resources (ARL-Tangram): tool, env and reward actions over
CPU, GPU-service and API-quota pools. Start at :class:`rollart.actions.runtime.ActionScheduler`."""
