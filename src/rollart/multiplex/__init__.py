"""Multiplexing: one training deployment shared by several RL jobs, time-sliced by context switches (PlexRL).

``service`` (TrainingService: Router + Scheduler over worker-process groups, Placer admission), ``worker``
(DeploymentWorker, one rank), ``router`` (deployment -> group, serial per group), ``scheduler`` (HRRS,
context switches, job FSM, SLO), ``state`` (StateManager tiers), ``placement`` (cyclic trace fitting),
``client`` (SharedTrainerClient for the Coordinator), ``inference`` (SharedInferenceWorker: one engine
shared by several jobs' rollouts, weights swapped through the StateManager in HRRS order; JobWorker views).
"""
