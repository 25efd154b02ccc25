"""The trainer's machinery: sandboxes, rollouts, batched acting, the learner,
checkpoints, metrics and the job that ties them together."""
