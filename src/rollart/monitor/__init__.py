"""Monitoring: tensorboard scalars/histograms/config, a compact terminal progress line, trajectory metrics.

    from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
    logger = MetricsLogger("runs/quickstart", config=cfg)          # resolved config -> text + config.json
    logger.log({"losses/policy": 0.1, "charts/success": 0.8}, step)
    logger.histogram("rollout/staleness", staleness_values, step)
    bar = ProgressBar(total_steps); bar.update(step, reward=0.5)
"""
from rollart.monitor.metrics import staleness_values, trajectory_metrics
from rollart.monitor.progress import ProgressBar
from rollart.monitor.tb_logger import NAMESPACES, MetricsLogger

__all__ = ["MetricsLogger", "NAMESPACES", "ProgressBar", "staleness_values", "trajectory_metrics"]
