"""agentfly_train: train agents on agentfly environments with RL, as an extension of TRL.

This release ships the pieces the environment library and its tests need (a tiny, locally built
Qwen2-architecture model and tokenizer for offline runs); the multi-turn GRPO/PPO trainer builds on them.
"""
