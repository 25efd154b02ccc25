"""Language-model policies: prompts from the GUI observation, a vLLM inference engine
with per-token log-probabilities and in-place weight sync, a transformers learner, and
a tiny model built locally for tests and demos (extras ``train`` and ``vllm``)."""
