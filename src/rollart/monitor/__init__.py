"""Monitoring: what a run shows its user, as tensorboard scalars, histograms and config, and a progress line:
``tb_logger`` (MetricsLogger, NAMESPACES), ``metrics`` (trajectory_metrics), ``progress`` (ProgressBar).

    from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
    logger = MetricsLogger("runs/quickstart", config=cfg)          # resolved config -> text + config.json
    logger.log({"losses/policy": 0.1, "charts/success": 0.8}, step)
    logger.histogram("rollout/staleness", staleness_values(batch, version), step)   # rollart.versions
    bar = ProgressBar(total_steps); bar.update(step, reward=0.5)
"""
from rollart.monitor.metrics import trajectory_metrics
from rollart.monitor.progress import ProgressBar
from rollart.monitor.tb_logger import NAMESPACES, MetricsLogger

__all__ = ["MetricsLogger", "NAMESPACES", "ProgressBar", "trajectory_metrics"]
