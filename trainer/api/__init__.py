"""What jobs, policies and the training loop agree on: sample types, the policy
interface and the job spec. Nothing here starts a process or touches a sandbox
(that is :mod:`trainer.infra`)."""

from trainer.api.policy import ActOutput, Policy
from trainer.api.types import Group, Step, Trajectory

__all__ = ["ActOutput", "Group", "Policy", "Step", "Trajectory"]
