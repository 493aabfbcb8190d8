"""Stock ``trl.GRPOTrainer`` training on an agentfly env through the ``environment_factory`` adapter.

TRL runs its own tool-calling loop; our env supplies the tools, the task and the reward
(``get_reward``). Configured by ``configs/trl_grpo.yaml`` (Hydra); the default trains the locally
built tiny model for two steps on ``agentfly/Arith-Calc``, offline, on the CPU.

    python examples/trl_grpo.py grpo.max_steps=1
    accelerate launch examples/trl_grpo.py model=Qwen/Qwen2.5-0.5B-Instruct grpo.use_cpu=false grpo.max_steps=200
"""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig, OmegaConf

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def load_model_and_tokenizer(name: str):
    """``"tiny"`` builds the local test model and tokenizer; anything else loads from the Hub or a path."""
    if name == "tiny":
        from agentfly_train.tiny_model import build_model, build_tokenizer

        tokenizer = build_tokenizer()
        return build_model(tokenizer), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(name), AutoTokenizer.from_pretrained(name, padding_side="left")


def grpo_arguments(settings: dict, config_class: type) -> dict:
    """The ``grpo:`` settings as keyword arguments of ``config_class`` (``trl.GRPOConfig``), with
    ``activation_checkpointing`` under the name the installed transformers takes: 5.23 renamed
    ``gradient_checkpointing`` so (given the old name, it warns with a FutureWarning); older releases know only it."""
    from agentfly_train.trl_args import checkpointing_argument

    arguments = dict(settings)
    if "activation_checkpointing" in arguments:
        arguments.update(checkpointing_argument(config_class, arguments.pop("activation_checkpointing")))
    return arguments


@hydra.main(config_path="../configs", config_name="trl_grpo", version_base=None)
def main(config: DictConfig) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentfly_envs.adapters.trl import make_trl_environment, trl_dataset_rows

    env_kwargs = OmegaConf.to_container(config.env.kwargs, resolve=True) or {}
    factory = make_trl_environment(config.env.id, **env_kwargs)
    rows = trl_dataset_rows(config.env.id, num_rows=config.env.num_rows, **env_kwargs)
    model, tokenizer = load_model_and_tokenizer(config.model)
    trainer = GRPOTrainer(
        model=model,
        args=GRPOConfig(**grpo_arguments(OmegaConf.to_container(config.grpo, resolve=True), GRPOConfig)),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=factory,
    )
    trainer.train()
    final = trainer.state.log_history[-2] if len(trainer.state.log_history) > 1 else {}
    print({key: value for key, value in final.items() if key.startswith(("reward", "tools/"))})
    return final


if __name__ == "__main__":
    main()
