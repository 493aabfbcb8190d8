"""LLM judges as rewards: an episode's answer, a rubric's criteria or a group's answers scored by a model served
behind an OpenAI-compatible endpoint (a vLLM server), its output constrained to a JSON schema.

The judge reads whole episodes (the task, the answer, the trajectory) and, for group ranking, a task's whole group,
so the trainer calls it once a group's episodes have ended (``agentfly_train.judging``); an env's own reward still
scores each answer as it is given. Importing this package needs nothing beyond the base install; asking a judge needs
the ``judge`` extra (the ``openai`` SDK).
"""

from agentfly_envs.judge.client import JudgeClient, JudgeSettings, JudgeUnavailableError
from agentfly_envs.judge.prompts import JudgeConfigError, JudgedEpisode, checked_template
from agentfly_envs.judge.rubric import RUBRICS, Criterion, load_rubric
from agentfly_envs.judge.verdicts import JUDGES, SCALE, Judge, Verdict, make_judge

__all__ = [
    "JUDGES",
    "RUBRICS",
    "SCALE",
    "Criterion",
    "Judge",
    "JudgeClient",
    "JudgeConfigError",
    "JudgeSettings",
    "JudgeUnavailableError",
    "JudgedEpisode",
    "Verdict",
    "checked_template",
    "load_rubric",
    "make_judge",
]
