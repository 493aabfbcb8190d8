"""The PPO critic: value model construction, value alignment, the update, and its checkpoint."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from agentfly_train.config import TINY_MODEL, CriticConfig, OptimConfig
from agentfly_train.critic import Critic, CriticSettings, build_value_model
from agentfly_train.tiny_model import build_model


@pytest.fixture(scope="module")
def policy(tiny_tokenizer):
    return build_model(tiny_tokenizer, hidden_size=32, num_layers=1, seed=0)


def _batch(seed: int = 0, batch: int = 4, prompt: int = 5, completion: int = 6):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(10, 500, (batch, prompt + completion), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    mask = torch.ones(batch, completion, dtype=torch.long)
    mask[0, 2:4] = 0  # a tool span
    mask[1, 4:] = 0  # padding
    return input_ids, attention_mask, mask


def test_value_model_from_the_policy_copies_its_backbone_and_adds_a_scalar_head(policy):
    critic = build_value_model(None, policy)
    assert critic.config.num_labels == 1 and critic.score.out_features == 1
    for name, tensor in policy.base_model.state_dict().items():
        assert torch.equal(critic.base_model.state_dict()[name], tensor), name
    fresh = build_value_model(TINY_MODEL, policy)
    assert not torch.equal(fresh.base_model.embed_tokens.weight, policy.base_model.embed_tokens.weight)


def test_values_are_read_at_the_position_that_samples_each_completion_token(policy):
    critic = Critic(
        build_value_model(None, policy),
        CriticSettings(CriticConfig(optim=OptimConfig(lr=1e-3)), micro_batch=3),
        Accelerator(cpu=True),
    )
    input_ids, attention_mask, _ = _batch()
    values = critic.values(input_ids, attention_mask, completion_length=6)
    logits = critic.model(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0]  # (B, 11)
    assert values.shape == (4, 6)
    torch.testing.assert_close(values, logits[:, 4:10])  # V of token t (position 5 + t) from position 4 + t


def test_update_fits_the_returns_and_reports_its_metrics(policy):
    settings = CriticSettings(
        CriticConfig(optim=OptimConfig(lr=3e-3), cliprange_value=10.0), mini_batch=2, micro_batch=1, epochs=4
    )
    critic = Critic(build_value_model(None, policy), settings, Accelerator(cpu=True))
    input_ids, attention_mask, mask = _batch()
    returns = torch.linspace(-1, 1, 24).view(4, 6)

    def error() -> float:
        values = critic.values(input_ids, attention_mask, 6)
        return ((values - returns).square() * mask).sum().item() / mask.sum().item()

    before = error()
    metrics = critic.update(input_ids, attention_mask, mask, returns, critic.values(input_ids, attention_mask, 6))
    assert error() < 0.5 * before
    assert set(metrics) == {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm"}
    assert metrics["critic/vf_loss"] > 0 and metrics["critic/grad_norm"] > 0
    assert all(parameter.grad is None for parameter in critic.model.parameters())  # its memory is free until then


def test_masked_tokens_do_not_move_the_critic(policy):
    settings = CriticSettings(CriticConfig(optim=OptimConfig(lr=1e-2)), mini_batch=4, micro_batch=4)
    input_ids, attention_mask, mask = _batch()
    results = []
    for garbage in (0.0, 1e3):
        torch.manual_seed(0)  # the same value head
        critic = Critic(build_value_model(None, policy), settings, Accelerator(cpu=True))
        old_values = critic.values(input_ids, attention_mask, 6)
        returns = torch.where(mask.bool(), torch.ones(4, 6), torch.full((4, 6), garbage))
        critic.update(input_ids, attention_mask, mask, returns, old_values)
        results.append(critic.values(input_ids, attention_mask, 6))
    torch.testing.assert_close(results[0], results[1])


def test_checkpoint_round_trip(policy, tmp_path):
    settings = CriticSettings(CriticConfig(optim=OptimConfig(lr=1e-2)), mini_batch=4, micro_batch=2)
    input_ids, attention_mask, mask = _batch()
    trained = Critic(build_value_model(None, policy), settings, Accelerator(cpu=True))
    trained.update(input_ids, attention_mask, mask, torch.ones(4, 6), trained.values(input_ids, attention_mask, 6))
    trained.save(str(tmp_path / "critic"))
    restored = Critic(build_value_model(TINY_MODEL, policy), settings, Accelerator(cpu=True))
    restored.load(str(tmp_path / "critic"))
    theirs = restored.model.state_dict()
    for name, ours in trained.model.state_dict().items():
        assert torch.equal(ours, theirs[name]), name
    step = next(iter(restored.optimizer.state.values()))["step"]
    assert step == next(iter(trained.optimizer.state.values()))["step"] == 1
    # the next update continues identically
    returns, old = torch.zeros(4, 6), trained.values(input_ids, attention_mask, 6)
    trained.update(input_ids, attention_mask, mask, returns, old)
    restored.update(input_ids, attention_mask, mask, returns, old)
    values = [critic.values(input_ids, attention_mask, 6) for critic in (trained, restored)]
    torch.testing.assert_close(values[0], values[1])
