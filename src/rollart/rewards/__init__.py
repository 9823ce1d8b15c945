"""Scoring trajectories: how a run scores each finished trajectory, and the serverless endpoint that runs
stateless reward functions on a process pool apart from training.

A run's side: ``scoring`` (Scoring: the reward source, started and stopped with the run), ``dispatch``
(RewardDispatcher: each finished trajectory to its reward function), ``config`` (RewardConfig), ``rules`` (rule
rewards: math_reward, exact_match), ``judges`` (model-based rewards). The endpoint: ``serve`` (RewardEndpoint,
ServeConfig, ``python -m rollart.rewards.serve``), ``process_pool`` (WorkerPool), ``pool_worker`` (one worker
process), ``registry`` (FunctionRegistry), ``client`` (RewardClient); ``local`` / ``ray_endpoint`` start one for
a run."""
