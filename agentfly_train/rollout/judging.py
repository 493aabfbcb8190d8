"""An LLM judge's scores as the episodes' rewards (``agent.reward_name=judge``, ``rubric``, ``group_rank``).

The judge reads whole episodes, and group ranking a task's whole group, so it scores episodes once they have ended,
on the judge client's own event loop: each group is handed to the judge as soon as its last episode ends
(:meth:`JudgeRewards.watch`), so the judge works while the step's other episodes are still played (and, off-policy,
while the generator plays the next ones), and the server batches the requests in flight together. A verdict replaces
the episode's outcome reward (its turn rewards stay) and adds the judge's components and reasoning. A judge that
stays down after its retries is an infrastructure failure: the group's episodes are left out of training
(:attr:`~agentfly_train.rollout.Trajectory.excluded`), counted in ``rollout/infra_failures``, and the run notes it
in one line (or stops, past ``rollout.max_infra_failure_rate``); they are never scored 0.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from agentfly_envs.errors import one_line
from agentfly_envs.judge import Judge, JudgedEpisode, JudgeUnavailableError, Verdict
from agentfly_train.rollout.episode import Trajectory


class JudgeRewards:
    """Scores finished episodes with ``judge``, in place (see the module's docstring); ``stop_server`` stops the
    judge's server when the run started it (:meth:`close` calls it)."""

    def __init__(self, judge: Judge, stop_server: Callable[[], None] | None = None) -> None:
        self.judge = judge
        self.stop_server = stop_server
        self._counted = (0, 0, 0, 0.0)

    def submit(self, trajectories: Sequence[Trajectory], tasks: Sequence[Mapping[str, Any]]) -> Future[None]:
        """Starts judging ``trajectories`` (one per row of ``tasks``; those of one task form its group; an excluded
        one is not judged); the future is done when every verdict is applied."""
        groups: dict[str, tuple[list[Trajectory], Mapping[str, Any]]] = {}
        for trajectory, task in zip(trajectories, tasks, strict=True):
            if not trajectory.excluded:
                groups.setdefault(_group_key(task), ([], task))[0].append(trajectory)
        return self.judge.client.submit(self._judge_all(list(groups.values())))

    def watch(self, tasks: Sequence[Mapping[str, Any]]) -> GroupsEnding:
        """A watcher for the episodes of ``tasks`` (one per row) that hands each task's group to the judge as soon as
        its last episode has ended (:meth:`GroupsEnding.ended`)."""
        return GroupsEnding(self, tasks)

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
        """Closes the judge's client, and stops its server if the run started it."""
        self.judge.client.close()
        if self.stop_server is not None:
            self.stop_server()


class GroupsEnding:
    """Hands a step's groups to the judge one by one, each as soon as its last episode has ended; the rollout loops
    call :meth:`ended` for each episode's final trajectory (after its replays), and the step waits in :meth:`wait`
    for the verdicts of the groups still being judged.

    Args:
        rewards: The judge.
        tasks: The step's rows, one per episode (equal rows form a group, as in :meth:`JudgeRewards.submit`).
    """

    def __init__(self, rewards: JudgeRewards, tasks: Sequence[Mapping[str, Any]]) -> None:
        self.rewards = rewards
        self.tasks = list(tasks)
        self._members: dict[str, list[int]] = {}
        for index, task in enumerate(self.tasks):
            self._members.setdefault(_group_key(task), []).append(index)
        self._left = {key: len(indices) for key, indices in self._members.items()}
        self._group_of = {index: key for key, indices in self._members.items() for index in indices}
        self._ended: dict[int, Trajectory] = {}
        self.judging: list[Future[None]] = []
        """The groups handed to the judge so far, in the order their last episodes ended."""

    def ended(self, index: int, trajectory: Trajectory) -> None:
        """Episode ``index`` ended with ``trajectory``; its group goes to the judge once all its episodes have."""
        if index in self._ended:
            raise ValueError(f"episode {index} ended twice")
        self._ended[index] = trajectory
        key = self._group_of[index]
        self._left[key] -= 1
        if self._left[key] == 0:
            members = self._members[key]
            group = [self._ended[i] for i in members]
            self.judging.append(self.rewards.submit(group, [self.tasks[i] for i in members]))

    def wait(self, trajectories: Sequence[Trajectory]) -> None:
        """Waits for every group's verdicts; ``trajectories`` are the step's (each must have been :meth:`ended`)."""
        missing = [index for index, trajectory in enumerate(trajectories) if self._ended.get(index) is not trajectory]
        if missing:
            raise RuntimeError(f"episodes {missing[:5]} were never handed to the judge (a rollout loop missed them)")
        for future in self.judging:
            future.result()


def judged_as_they_end(
    judge: JudgeRewards | None,
    tasks: Sequence[Mapping[str, Any]],
    play: Callable[[Callable[[int, Trajectory], None] | None], list[Trajectory]],
) -> list[Trajectory]:
    """The episodes of ``tasks`` that ``play(ended)`` plays (it calls ``ended(index, trajectory)`` as each one ends),
    each group handed to ``judge`` as soon as it has ended, returned once every verdict is in; without a judge,
    ``play(None)``'s."""
    if judge is None:
        return play(None)
    groups = judge.watch(tasks)
    trajectories = play(groups.ended)
    groups.wait(trajectories)
    return trajectories


def _group_key(task: Mapping[str, Any]) -> str:
    """What tells a task's group: its row, as canonical JSON (the chains of one task are equal rows)."""
    return json.dumps(task, sort_keys=True, default=str)


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
