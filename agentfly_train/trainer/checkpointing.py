"""The trainer's checkpoints: TRL's, plus the KL controller and the critic, written atomically with a
manifest (:mod:`agentfly_train.checkpoints`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from agentfly_train.checkpoints import (
    PREFIX,
    CheckpointDiskFullError,
    disk_full,
    newest_complete,
    publish,
    staging_dir,
)

ALGORITHM_STATE_FILE = "algorithm_state.json"
"""The KL controller's state in a checkpoint directory."""
CRITIC_DIR = "critic"
"""The critic's weights and optimiser state in a checkpoint directory."""
SCHEDULE_STATE_FILE = "rollout_schedule_{process}.json"
"""Each process's rollout schedule state (:meth:`~agentfly_train.trainer.schedules.RolloutSchedule.state_dict`), when
it has one (off-policy training: the prompts not yet trained)."""


class CheckpointMixin:
    """The trainer's checkpoints. Mixed into :class:`~agentfly_train.trainer.AgentGRPOTrainer`, whose state it uses."""

    _staging: Path | None = None

    """While a checkpoint is saved, the directory the ``Trainer`` writes it into (:meth:`_get_output_dir`)."""

    def _get_output_dir(self, trial: Any) -> str:
        """The run directory, or while a checkpoint is saved its staging directory (``checkpoint-K.tmp``)."""
        return str(self._staging) if self._staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint plus the KL controller, the critic and the rollout schedule's state, written atomically
        (:mod:`agentfly_train.checkpoints`): every process writes its part into ``checkpoint-K.tmp/``, then the
        main process adds the manifest and renames it to ``checkpoint-K``. A failed or interrupted save leaves no
        staging directory behind.

        Raises:
            CheckpointDiskFullError: the disk filled up (one line naming the intact previous checkpoint).
        """
        run_dir = Path(super()._get_output_dir(trial))
        staging = staging_dir(run_dir, self.state.global_step)
        final = run_dir / f"{PREFIX}-{self.state.global_step}"
        staged = staging / final.name
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)  # left by a kill during an earlier save of this step
        self.accelerator.wait_for_everyone()
        self._staging = staging
        try:
            if self.kl_ctrl is not None and self.args.should_save:
                staged.mkdir(parents=True, exist_ok=True)
                (staged / ALGORITHM_STATE_FILE).write_text(json.dumps({"kl_ctrl": self.kl_ctrl.state_dict()}))
            if self.critic is not None:
                self.critic.save(str(staged / CRITIC_DIR))
            schedule_state = self.schedule.state_dict()
            if schedule_state:
                staged.mkdir(parents=True, exist_ok=True)
                path = staged / SCHEDULE_STATE_FILE.format(process=self.accelerator.process_index)
                path.write_text(json.dumps(schedule_state))
            super()._save_checkpoint(model, trial)
            self.accelerator.wait_for_everyone()
            if self.args.should_save:
                publish(staged, final)
        except BaseException as error:
            if not self.args.should_save:
                raise
            full = isinstance(error, Exception) and disk_full(error, run_dir)  # before the staging frees space
            shutil.rmtree(staging, ignore_errors=True)
            if not full:
                raise
            previous, _ = newest_complete(run_dir, check_contents=False)
            state, action = (
                (f"the previous checkpoint {previous.name} is intact", "resume")
                if previous is not None
                else ("there is no earlier checkpoint", "start over")
            )
            raise CheckpointDiskFullError(
                f"no space left on device while writing {final.name} in {run_dir}; {state}; free space and rerun "
                f"the same command to {action}"
            ) from None
        finally:
            self._staging = None

    def finish_from_checkpoint(self, checkpoint: str, state: Any) -> None:
        """Takes up a run killed after its last step: the checkpoint's weights and ``state`` (its ``TrainerState``),
        with no further step (``Trainer.train`` would take one more)."""
        self._load_from_checkpoint(checkpoint)
        self.state = state

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """The ``Trainer``'s warnings about a loaded checkpoint's missing and unexpected keys, without the tied
        weights (``lm_head.weight`` = the input embeddings): ``save_pretrained`` leaves them out, and loading the
        weight they are tied to restores them."""
        tied = getattr(self.accelerator.unwrap_model(self.model), "all_tied_weights_keys", None) or {}
        missing = [key for key in load_result.missing_keys if key not in tied or tied[key] in load_result.missing_keys]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's resume, plus the KL controller, the critic and the rollout schedule's state of the checkpoint."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        if self.kl_ctrl is not None:
            state = json.loads((Path(checkpoint) / ALGORITHM_STATE_FILE).read_text())
            self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        if self.critic is not None:
            self.critic.load(str(Path(checkpoint) / CRITIC_DIR))
        schedule_state = Path(checkpoint) / SCHEDULE_STATE_FILE.format(process=self.accelerator.process_index)
        if schedule_state.is_file():
            self.schedule.load_state_dict(json.loads(schedule_state.read_text()))
