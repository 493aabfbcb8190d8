"""The TRL adapter: unit behaviour, and stock ``trl.GRPOTrainer`` driving our env through it."""

import inspect

import pytest

from agentfly_envs.adapters.trl import TRLEnvironment, make_trl_environment, trl_dataset_rows

ROW = {"question": "Ava has 3 bags of 4 apples. How many apples?", "answer": "3*4=<<3*4=12>>12\n#### 12"}


def test_factory_class_exposes_tools_as_methods_with_the_env_schemas():
    from transformers.utils import get_json_schema

    factory = make_trl_environment("agentfly/Arith-Calc")
    assert issubclass(factory, TRLEnvironment)
    env = factory()
    public = {
        name for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not name.startswith("_")
    }
    assert public == {"answer", "calculator", "get_reward", "reset"}
    for name in ("answer", "calculator"):
        assert get_json_schema(getattr(env, name)) == env.tool_env.tools[name].schema


def test_reset_from_row_then_tools_then_reward():
    env = make_trl_environment("agentfly/Arith-Calc")()
    text = env.reset(**ROW)
    assert text.endswith(ROW["question"]) and "answer tool" in text
    assert env.calculator(expression="3*4") == "12"
    assert env.calculator(expression="1/0") == "Error: division by zero"
    assert env.get_reward() == 0.0
    assert env.answer(answer="12") == "12"
    assert env.get_reward() == 1.0
    assert env.calculator(expression="1+1").startswith("Error: the episode is over")
    assert env.last_info["error_counts"]["tool_error"] == 1


def test_reset_with_prompt_returns_none_and_index_rows_select_tasks():
    env = make_trl_environment("agentfly/Arith-Calc")()
    assert env.reset(prompt=[{"role": "user", "content": "q"}], **ROW) is None
    env.reset(index=5)
    assert env.last_info["task_index"] == 5
    env.reset()
    assert env.last_info["task_index"] is not None


def test_wrong_answer_and_turn_budget():
    env = make_trl_environment("agentfly/Arith-Calc", max_turns=2)()
    env.reset(**ROW)
    env.answer(answer="13")
    assert env.get_reward() == 0.0
    env.reset(**ROW)
    env.calculator(expression="1")
    env.calculator(expression="2")  # second turn: budget spent, truncated
    assert env.calculator(expression="3").startswith("Error: the episode is over")
    assert env.get_reward() == 0.0


def test_dataset_rows_carry_prompt_and_task_fields():
    rows = trl_dataset_rows("agentfly/Arith-Calc", num_rows=3, level="easy")
    assert len(rows) == 3
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]
    assert "answer tool" in rows[0]["prompt"][0]["content"]
    assert rows[0]["question"] == rows[0]["prompt"][1]["content"]


@pytest.mark.slow
def test_stock_trl_grpo_trainer_runs_our_env(tmp_path, tiny_tokenizer):
    """A tiny model that memorised two golden transcripts calls our tools inside stock TRL and earns reward."""
    import gymnasium as gym
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentfly_train.tiny_model import build_model

    tokenizer = tiny_tokenizer
    factory = make_trl_environment("agentfly/Arith-Calc", level="easy")
    rows = trl_dataset_rows("agentfly/Arith-Calc", num_rows=2, level="easy")

    # Warm start: memorise the golden conversations, rendered as TRL renders them (tools sorted by name).
    env = gym.make("agentfly/Arith-Calc", **{**factory.env_kwargs, "parser": "tool_calls"})
    texts = []
    for index in range(2):
        _, info = env.reset(options={"index": index})
        messages = info["messages"]
        for action in env.unwrapped.golden_actions():
            messages.append(action)
            messages += env.step(action)[4]["messages"]
        tools = sorted(info["tools"], key=lambda tool: tool["function"]["name"])
        texts.append(tokenizer.apply_chat_template(messages, tools=tools, tokenize=False))
    model = build_model(tokenizer, hidden_size=128)
    tokenizer.padding_side = "right"
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    tokenizer.padding_side = "left"
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(250):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    calls = []
    original = TRLEnvironment._call_tool

    def spy(self, name, arguments):
        calls.append(name)
        return original(self, name, arguments)

    TRLEnvironment._call_tool = spy
    try:
        args = GRPOConfig(
            output_dir=str(tmp_path),
            max_steps=1,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=200,
            temperature=0.7,
            gradient_checkpointing=False,
            report_to=[],
            logging_steps=1,
            use_cpu=True,
            save_strategy="no",
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            environment_factory=factory,
        )
        trainer.train()
    finally:
        TRLEnvironment._call_tool = original
    logs = trainer.state.log_history[0]
    assert "calculator" in calls and "answer" in calls
    assert logs["tools/call_frequency"] >= 2
    assert logs[f"rewards/{factory.__name__}/mean"] >= 0.5
