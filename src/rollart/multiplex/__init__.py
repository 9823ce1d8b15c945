"""Multiplexing: one training deployment shared by several RL jobs, time-sliced by context switches (PlexRL).

``service`` (TrainingService: Router + Scheduler over worker-process groups, Placer admission),
``deployment_worker`` (DeploymentWorker, one rank), ``router`` (deployment -> group, serial per group), ``hrrs``
(Scheduler: HRRS order, context switches, job FSM, SLO), ``state`` (StateManager tiers), ``placer`` (Placer:
cyclic trace fitting), ``inference`` (SharedInferenceWorker: one engine shared by several jobs' rollouts, weights
swapped through the StateManager in HRRS order), ``client`` (what a job's Coordinator holds: SharedTrainerClient,
JobWorker views), ``messages`` (the typed requests of these services: a job's operations, the Scheduler's,
JobMessage).
"""
