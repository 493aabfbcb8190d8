"""An LLM judge's scores as the episodes' rewards (``agent.reward_name=judge``, ``rubric``, ``group_rank``).

The judge reads whole episodes, and group ranking a task's whole group, so it scores episodes once they have ended,
on the judge client's own event loop: a step's groups are judged concurrently (the server batches the requests),
and the off-policy schedule hands each group to the judge as soon as it ends, while the generator plays the next
episodes. A verdict replaces the episode's outcome reward (its turn rewards stay) and adds the judge's components
and reasoning. A judge that stays down after its retries is an infrastructure failure: the group's episodes are left
out of training (:attr:`~agentfly_train.rollout.Trajectory.excluded`), counted in ``rollout/infra_failures``, and the
run notes it in one line (or stops, past ``rollout.max_infra_failure_rate``); they are never scored 0.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from agentfly_envs.errors import one_line
from agentfly_envs.judge import Judge, JudgedEpisode, JudgeUnavailableError, Verdict
from agentfly_train.rollout.episode import Trajectory


class JudgeRewards:
    """Scores finished episodes with ``judge``, in place (see the module's docstring)."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self._counted = (0, 0, 0, 0.0)

    def submit(self, trajectories: Sequence[Trajectory], tasks: Sequence[Mapping[str, Any]]) -> Future[None]:
        """Starts judging ``trajectories`` (one per row of ``tasks``; those of one task form its group; an excluded
        one is not judged); the future is done when every verdict is applied."""
        groups: dict[str, list[Trajectory]] = {}
        for trajectory, task in zip(trajectories, tasks, strict=True):
            if not trajectory.excluded:
                key = json.dumps(task, sort_keys=True, default=str)
                groups.setdefault(key, []).append(trajectory)
        rows = {json.dumps(task, sort_keys=True, default=str): task for task in tasks}
        return self.judge.client.submit(self._judge_all([(group, rows[key]) for key, group in groups.items()]))

    def score(self, trajectories: Sequence[Trajectory], tasks: Sequence[Mapping[str, Any]]) -> None:
        """:meth:`submit`, waiting for the verdicts."""
        self.submit(trajectories, tasks).result()

    async def _judge_all(self, groups: list[tuple[list[Trajectory], Mapping[str, Any]]]) -> None:
        await asyncio.gather(*(self._judge_group(group, task) for group, task in groups))

    async def _judge_group(self, group: list[Trajectory], task: Mapping[str, Any]) -> None:
        episodes = [JudgedEpisode.from_messages(trajectory.messages, task) for trajectory in group]
        try:
            verdicts = await self.judge.judge_group(episodes)
        except JudgeUnavailableError as error:
            for trajectory in group:
                trajectory.infra_failure = f"reward {self.judge.kind}: {one_line(error)}"
            return
        for trajectory, verdict in zip(group, verdicts, strict=True):
            apply_verdict(trajectory, verdict)

    def metrics(self) -> dict[str, float]:
        """Since the last call: ``judge/calls`` (requests answered), ``judge/cache_hits`` (answers from the cache),
        ``judge/failures`` (failed tries, each retry counted) and ``judge/seconds`` (the answered requests' time,
        summed over requests in flight together)."""
        client = self.judge.client
        now = (client.calls, client.cache_hits, client.failures, client.seconds)
        delta = [new - old for new, old in zip(now, self._counted, strict=True)]
        self._counted = now
        return dict(zip(("judge/calls", "judge/cache_hits", "judge/failures", "judge/seconds"), delta, strict=True))

    def close(self) -> None:
        """Closes the judge's client."""
        self.judge.client.close()


def apply_verdict(trajectory: Trajectory, verdict: Verdict) -> None:
    """Makes ``verdict``'s score the episode's outcome reward (on its last turn, its turn rewards kept), and adds the
    judge's components and reasoning.

    Example:
        >>> episode = Trajectory(prompt_ids=[], turn_rewards=[-0.1, 1.0], outcome_reward=1.0, reward=0.9)
        >>> apply_verdict(episode, Verdict(0.5, {"judge/score": 0.5}, "half right"))
        >>> episode.turn_rewards, episode.reward, episode.reward_components, episode.judge_reasoning
        ([-0.1, 0.5], 0.4, {'judge/score': 0.5}, 'half right')
    """
    rewards = trajectory.turn_rewards
    if rewards:
        rewards[-1] = rewards[-1] - trajectory.outcome_reward + verdict.score
    else:
        rewards.append(verdict.score)
    trajectory.reward = float(sum(rewards))
    trajectory.outcome_reward = verdict.score
    trajectory.reward_components = {**trajectory.reward_components, **verdict.components}
    trajectory.judge_reasoning = verdict.reasoning
