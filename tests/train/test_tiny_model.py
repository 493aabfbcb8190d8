import pytest

torch = pytest.importorskip("torch")


def test_tokenizer_round_trips_chat_with_tool_calls(tiny_tokenizer):
    messages = [
        {"role": "system", "content": "You solve problems."},
        {"role": "user", "content": "What is 2+3? ünïcödé ✓"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}]},
        {"role": "tool", "name": "calculator", "content": "5"},
    ]  # fmt: skip
    text = tiny_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>' in text
    assert "<tool_response>\n5\n</tool_response>" in text
    ids = tiny_tokenizer(text)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    for token in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert len(tiny_tokenizer(token)["input_ids"]) == 1
    assert tiny_tokenizer.eos_token == "<|im_end|>" and tiny_tokenizer.padding_side == "left"


def test_trl_recognises_the_template(tiny_tokenizer):
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    assert supports_tool_calling(tiny_tokenizer)
    add_response_schema(tiny_tokenizer)  # raises for an unknown template


def test_model_forward_and_save_load(tmp_path, tiny_tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentfly_train.tiny_model import build_model

    model = build_model(tiny_tokenizer)
    ids = torch.tensor([tiny_tokenizer("Ava has 3 bags.")["input_ids"]])
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tiny_tokenizer))
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.allclose(reloaded(input_ids=ids).logits, logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path).chat_template == tiny_tokenizer.chat_template


def test_a_saved_tiny_policy_reloads_with_the_same_token_ids(tmp_path, tiny_tokenizer):
    from agentfly_train.config import load_config
    from agentfly_train.models import load_policy
    from agentfly_train.tiny_model import build_tiny_checkpoint

    build_tiny_checkpoint(tmp_path, hidden_size=32, num_layers=1)
    _, tokenizer = load_policy(load_config([f"actor_rollout_ref.model.path={tmp_path}"]))
    # transformers alone would pick Qwen2Tokenizer next to the Qwen2 config.json, whose pre-tokenizer differs
    text = 'You are a careful assistant.\n{"name": "calculator"} Mateo has 9 boxes with 8 beads.'
    assert tokenizer(text)["input_ids"] == tiny_tokenizer(text)["input_ids"]
