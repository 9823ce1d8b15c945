"""Scoring trajectories: how a run scores each finished trajectory, and the serverless endpoint that runs
stateless reward functions on a process pool apart from training.

A run's side: ``scoring`` (Scoring: the reward source, started and stopped with the run), ``dispatch``
(RewardDispatcher: each finished trajectory to its reward function), ``config`` (RewardConfig), ``rules`` (rule
rewards: math_reward, exact_match), ``judges`` (model-based rewards). Verifiers, which an env or the endpoint runs
on one answer and a row's ground truth: ``verifiers`` (math_verify, exact_match, regex_match, numeric,
format_reward, with_format, verifier_of), ``math_equal`` (math-verify in bounded time from any thread),
``code_verifier`` (code_tests: a row's tests in the sandbox, shared with the HumanEval env). The endpoint:
``serve`` (RewardEndpoint, ServeConfig, ``python -m rollart.rewards.serve``), ``process_pool`` (WorkerPool),
``pool_worker`` (one worker process), ``registry`` (FunctionRegistry, BUILTIN_FUNCTIONS), ``client``
(RewardClient); ``local`` / ``ray_endpoint`` start one for a run."""
