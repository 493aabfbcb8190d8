"""The ``agent.*`` section of the configuration: the agent an episode plays (env, tools, parser, rewards, turn
budgets, an agent program) and its context policy (``agent.context.*``). Standard library only (and
:mod:`agentfly_envs`, the package below, where a property reads it), as :mod:`agentfly_train.config.schema`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentfly_envs.registry import load_entry_point
from agentfly_train.config.constraints import (
    NonNegative,
    OneOf,
    Positive,
    Registered,
    setting,
)

JUDGE_REWARDS = ("judge", "rubric", "group_rank")
"""``agent.reward_name`` values scored by the LLM judge of ``reward.judge.*`` (:mod:`agentfly_envs.judge`)."""

CONTEXT_POLICIES = "agentfly_train.context_policies:CONTEXT_POLICIES"
"""The registry of ``agent.context.policy``, by entry point (this package imports nothing above it)."""
SUMMARY_PROMPT = (
    "You are summarising the earlier steps of an agent working on the task below, for the agent that continues "
    "it. In a few sentences, say what it did, what it found out and what is left to do."
)
"""The default instruction of ``agent.context.policy=summarize``'s requests."""


@dataclass
class ContextConfig:
    """What an episode's next turn is sampled after (``agent.context``; :mod:`agentfly_train.context_policies`).

    Attributes:
        policy: ``full`` (every turn: the context grows by prefix), ``window`` (the system and first user message and
            the last ``window`` turns), ``mask_observations`` (every turn, the env's answers older than the last
            ``window`` turns replaced by ``placeholder``) or ``summarize`` (the last ``window`` turns, after the
            task followed by a summary of the older turns that the policy itself writes; its tokens are not
            trained). Every policy but ``full`` trains step-wise (``step_wise``).
        window: Turns kept whole by ``window``, ``mask_observations`` and ``summarize`` (>= 1).
        placeholder: What stands for an old env answer's content under ``mask_observations``.
        summary_tokens: New tokens of a ``summarize`` summary, at most.
        summary_prompt: The instruction of a ``summarize`` request (followed by the task, the earlier summary and the
            turns to summarise).
        step_wise: Train each turn as its own row, in exactly the context it was sampled in (its sampled tokens
            after that context), with its episode's advantage, also where the context grows by prefix (``full``);
            ``false``: one row per episode where the context is never rewritten.
    """

    policy: str = setting("full", Registered(CONTEXT_POLICIES))
    window: int = setting(4, Positive())
    placeholder: str = "[observation omitted]"
    summary_tokens: int = setting(256, Positive())
    summary_prompt: str = SUMMARY_PROMPT
    step_wise: bool = False

    @property
    def rewrites_context(self) -> bool:
        """Whether the policy rebuilds the context between turns (every policy but ``full``)."""
        return load_entry_point(CONTEXT_POLICIES).get(self.policy).rewrites_context


@dataclass
class AgentConfig:
    """The agent: which env, how the model talks to it, and the rollout budgets.

    Attributes:
        env: Registered env id (``agentfly/...``), ``openenv:<url>`` (an env on a server speaking OpenEnv's
            protocol) or ``verifiers:<module>`` (a verifiers taskset); ``null`` (AgentFly's way) builds the env from
            the guide's parts: the rows of ``data.train_files`` (``agentfly/Files``), ``agent.tools``,
            ``agent.reward_name`` and ``agent.agent_type``.
        env_kwargs: Extra ``gymnasium.make`` keyword arguments (e.g. ``level`` for Arith-Calc).
        tool_options: Per-tool options, ``{tool: {option: value}}`` (the env's ``tool_options``), e.g.
            ``{google_search: {backend: bm25, corpus_file: wiki.jsonl}}``.
        agent_type: ``hf`` (the model family's own tool-call format, read with transformers' response parsing and
            written as its chat template renders calls: Qwen's ``<tool_call>`` JSON, Llama 3.1's bare JSON, gpt-oss's
            commentary channel...), ``hermes`` (``<tool_call>`` JSON blocks whatever the template), ``react``,
            ``code`` (formats the system prompt describes, with the tools) or ``gui`` (GUI agents' actions, UI-TARS's
            ``Action: click(start_box='(x,y)')`` or Qwen2.5-VL's ``computer_use`` calls, for the web envs): a name
            in the env parsers (``hf`` names the ``tool_calls`` parser: the trainer reads the chat template's own
            tool calls and hands the env structured calls, :mod:`agentfly_train.chat_templates.families`).
        tools: Tool names replacing the env's defaults (``google_search`` is our ``search`` under AgentFly's
            name), and MCP servers whose tools the agent may call too: ``mcp:<command line>`` (a stdio server) or
            ``mcp:http(s)://...`` (a streamable-HTTP one; the ``mcp`` extra); ``null`` keeps the env's
            (``[calculator]`` for an env built from files).
        model_name_or_path: Alias of ``actor_rollout_ref.model.path`` (AgentFly's spelling).
        template: Chat template: ``null`` for the tokenizer's own, one we ship (``compact_tools``, ``qwen2_5_vl``,
            ``qwen3_vl``), a TRL template name (``qwen2_5``, ``llama3_1``, ...) or a path to a ``.jinja`` file. One
            that rewrites past turns (Qwen3's, gpt-oss's) is replaced by TRL's training variant of its family for
            rollouts and the warm start (a ``note:`` says so).
        chat_template_kwargs: Extra variables of the chat template, passed to every rendering (rollouts, warm
            start, dry run), e.g. ``{enable_thinking: false}`` for Qwen3 or ``{reasoning_effort: low}`` for gpt-oss.
        past_reasoning: What a reasoning model's earlier turns keep of their reasoning in the next turn's prompt:
            ``keep`` (the sampled tokens as they are: one growing sequence per episode, trained once) or ``drop``
            (the tokens through the end of the turn's reasoning, e.g. Qwen3's ``</think>``, leave the context; each
            turn is then trained as its own sample in the context it was sampled in, with its episode's advantage).
        reward_name: Registered reward function replacing the env's scoring; ``null`` keeps it. ``judge``, ``rubric``
            and ``group_rank`` score ended episodes with the LLM judge of ``reward.judge.*`` instead (the env's own
            reward still decides ``accuracy``).
        turn_reward_name: Registered turn reward (``agentfly_envs.turn_rewards``, e.g. ``tool_error_penalty``) the env
            adds to each step's reward (the env's ``turn_reward``): the episode's reward is then the sum of its
            turns' rewards; ``null``: only the step that ends the episode pays.
        max_turns: Assistant turns per episode.
        num_chains: Rollouts per prompt (the GRPO group size).
        max_tokens_per_turn: New tokens per assistant turn (also capped by what is left of
            ``actor_rollout_ref.rollout.response_length``).
        use_agent: ``false`` gives the model one turn and no tools.
        backend: Generation backend, ``hf`` or ``vllm`` (alias of ``actor_rollout_ref.rollout.name``); AgentFly's
            ``async_verl``, ``verl``, ``async_vllm`` mean ``vllm``, ``transformers`` means ``hf``
            (:data:`agentfly_train.generation.base.GENERATION_BACKENDS` knows these names).
        imports: The user's modules (dotted names) or ``.py`` files, imported before the configuration is checked
            (and on every process that builds envs): what they register (tools, rewards, parsers, env ids,
            estimators, backends) can then be named by the other keys.
        max_images: Images (screenshots) in an episode's context, prompt and observations together: the newest are
            kept, and each older one is replaced by a line of text, so the policy always sees the latest screens;
            each turn is then trained as its own sample in the context it was sampled in (as with
            ``past_reasoning=drop``). ``null``: no cap (the context keeps every screenshot).
        image_max_pixels: Largest image the policy sees, in pixels (width x height): the image processor scales a
            larger screenshot down (aspect kept, sides in multiples of its patch size) for rollouts and the loss
            alike; ``null``: the processor's own limit.
        program: The user's agent, ``<module or path/file.py>:<function>``, played instead of the trainer's turn loop:
            called (sync or async) with ``endpoint`` (``base_url``, ``api_key``, ``model``: an OpenAI-compatible
            ``/v1/chat/completions`` served from the policy, one per episode) and ``task`` (the row), it returns a
            float reward or a string answer the env scores against the row (:mod:`agentfly_train.programs`; each
            choice a request samples is a turn of ``max_turns``); ``null``: the trainer's own turn loop.
        program_timeout: Seconds an episode's program may run; one that runs longer scores 0 (counted in
            ``reward/errors``).
        context: The context policy (``agent.context.policy``, ``.window``, ...) and step-wise training
            (``agent.context.step_wise``): :class:`ContextConfig`.
    """

    env: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    tool_options: dict[str, Any] = field(default_factory=dict)
    agent_type: str = setting("hf", Registered("agentfly_envs.parsers:PARSERS"))
    tools: list[str] | None = setting(None, Registered("agentfly_envs.tools:TOOLS", prefixes=("mcp:",)))
    model_name_or_path: str | None = None
    template: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    past_reasoning: str = setting("keep", OneOf(("keep", "drop")))
    reward_name: str | None = setting(None, Registered("agentfly_envs.rewards:REWARDS", also=JUDGE_REWARDS))
    turn_reward_name: str | None = setting(None, Registered("agentfly_envs.turn_rewards:TURN_REWARDS"))
    max_turns: int = setting(4, Positive())
    num_chains: int = setting(8, Positive())
    max_tokens_per_turn: int = setting(1024, Positive())
    use_agent: bool = True
    backend: str | None = None
    imports: list[str] = field(default_factory=list)
    max_images: int | None = setting(None, NonNegative(" (null: no cap)"))
    image_max_pixels: int | None = setting(None, Positive(allow_none=True))
    program: str | None = None
    program_timeout: float = setting(300.0, Positive())
    context: ContextConfig = field(default_factory=ContextConfig)

    @property
    def sees_images(self) -> bool:
        """Whether the env's observations hold images (``env_kwargs.obs=screenshot``): a vision-language policy."""
        return self.env_kwargs.get("obs") == "screenshot"

    @property
    def trains_turn_rows(self) -> bool:
        """Whether each turn is trained as its own row, in the context it was sampled in: asked for
        (``context.step_wise``), or the rollout rewrites an episode's context between turns (past reasoning dropped,
        screenshots beyond ``max_images``, a context policy other than ``full``, an agent program's requests). The
        one place that decides."""
        return self.turn_rows_setting is not None

    @property
    def turn_rows_setting(self) -> str | None:
        """The setting that makes the run train turn rows (:attr:`trains_turn_rows`), as the user writes it, or
        ``None``."""
        settings = {
            "agent.past_reasoning=drop": self.past_reasoning == "drop",
            "agent.max_images": self.sees_images and self.max_images is not None,
            f"agent.context.policy={self.context.policy}": self.context.rewrites_context,
            "agent.context.step_wise=true": self.context.step_wise,
            "agent.program": self.program is not None,  # its requests need not extend each other
        }
        return next((setting for setting, on in settings.items() if on), None)

    @property
    def turns(self) -> int:
        """The turns an episode may take: ``max_turns``, or 1 with ``use_agent=false``."""
        return self.max_turns if self.use_agent else 1
