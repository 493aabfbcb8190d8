"""Agent programs: the user's own agent (a function calling an OpenAI-compatible chat API with tools), trained on the
tokens it made the policy sample.

``agent.program=<module or path/file.py>:<function>`` names it
(:func:`~agentfly_envs.user_code.load_function`); the rollout serves each
episode's program its own ``/v1/chat/completions`` endpoint from the run's generation backend
(:mod:`~agentfly_train.programs.endpoint`), records every request's prompt ids, sampled ids and log-probs
(:mod:`~agentfly_train.programs.session`), and scores what the program returns (:meth:`ProgramSettings.play`).
"""

from agentfly_train.programs.endpoint import Endpoint
from agentfly_train.programs.runner import ProgramSettings

__all__ = ["Endpoint", "ProgramSettings"]
