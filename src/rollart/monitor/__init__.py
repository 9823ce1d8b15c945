"""Monitoring: what a run shows its user, as scalars, histograms and config, and a progress line: ``logger``
(MetricsLogger, NAMESPACES, the loggers a run can name), its loggers ``tb_logger`` (tensorboard, the default)
and ``wandb_logger`` (Weights & Biases, ``logger=wandb``), ``metrics`` (trajectory_metrics), ``progress``
(ProgressBar).

    from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
    logger = MetricsLogger("runs/quickstart", config=cfg)          # resolved config -> text + config.json
    logger.log({"losses/policy": 0.1, "charts/success": 0.8}, step)
    logger.histogram("rollout/staleness", staleness_values(batch, version), step)   # rollart.versions
    bar = ProgressBar(total_steps); bar.update(step, reward=0.5)
"""
from rollart.monitor.logger import LOGGERS, NAMESPACES, MetricsLogger, check_loggers
from rollart.monitor.metrics import trajectory_metrics
from rollart.monitor.progress import ProgressBar

__all__ = ["LOGGERS", "MetricsLogger", "NAMESPACES", "ProgressBar", "check_loggers", "trajectory_metrics"]
