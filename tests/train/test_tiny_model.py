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


def test_template_is_qwen25_with_a_compact_tool_list_and_trl_parses_its_tool_calls(tiny_tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, qwen2_5_chat_template, supports_tool_calling

    tools = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate it.\n\nMore text.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]  # fmt: skip
    messages = [
        {"role": "system", "content": "Solve it."},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}]},
        {"role": "tool", "name": "calculator", "content": "5"},
        {"role": "tool", "name": "calculator", "content": "6"},
        {"role": "assistant", "content": "It is 5."},
    ]  # fmt: skip
    ours = tiny_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    qwen = tiny_tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, chat_template=qwen2_5_chat_template
    )
    assert ours.startswith("<|im_start|>system\nSolve it.\n\nTools, called as <tool_call>")
    assert "\n- calculator(expression): Evaluate it.<|im_end|>\n" in ours and "More text" not in ours
    turns = "<|im_start|>user\n2+3?"
    assert ours[ours.index(turns) :] == qwen[qwen.index(turns) :]  # every turn exactly as Qwen2.5 renders it
    assert supports_tool_calling(tiny_tokenizer) and is_chat_template_prefix_preserving(tiny_tokenizer)
    parsed = tiny_tokenizer.parse_response(
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call><|im_end|>',
        prefix=tiny_tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True),
    )
    assert parsed["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "2+3"}}


def test_tokenizer_spells_digits_one_by_one_like_qwen2(tiny_tokenizer):
    tokens = tiny_tokenizer.tokenize("Ava has 64 beads: 9*8")
    assert tokens[tokens.index("Ġ") :] == ["Ġ", "6", "4", "Ġbeads", ":", "Ġ", "9", "*", "8"]


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
    reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded_tokenizer.chat_template == tiny_tokenizer.chat_template
    assert reloaded_tokenizer.response_template == tiny_tokenizer.response_template


def test_a_saved_tiny_policy_reloads_with_the_same_token_ids(tmp_path, tiny_tokenizer):
    from agentfly_train.models import load_policy
    from agentfly_train.tiny_model import build_tiny_checkpoint
    from tests.helpers.runs import quickstart_config

    build_tiny_checkpoint(tmp_path, hidden_size=32, num_layers=1)
    _, tokenizer = load_policy(quickstart_config([f"actor_rollout_ref.model.path={tmp_path}"]))
    # transformers alone would pick Qwen2Tokenizer next to the Qwen2 config.json, whose pre-tokenizer differs
    text = 'You are a careful assistant.\n{"name": "calculator"} Mateo has 9 boxes with 8 beads.'
    assert tokenizer(text)["input_ids"] == tiny_tokenizer(text)["input_ids"]


@pytest.mark.parametrize("model_path", ["agentfly:tiny-vl", "agentfly:tiny-qwen3-vl"])
def test_the_tiny_vlms_initialise_text_and_vision_weights_at_initializer_range(tiny_tokenizer, model_path):
    import copy

    from agentfly_train.tiny_model import add_vision_tokens
    from agentfly_train.tiny_policies import TINY_POLICIES

    tokenizer = add_vision_tokens(copy.deepcopy(tiny_tokenizer))
    for initializer_range in (0.02, 0.1):
        model = TINY_POLICIES.get(model_path).model(tokenizer, initializer_range=initializer_range)
        for name in ("model.language_model.layers.0.mlp.up_proj.weight", "model.visual.patch_embed.proj.weight"):
            std = model.get_parameter(name).std().item()
            assert std == pytest.approx(initializer_range, rel=0.1), name
