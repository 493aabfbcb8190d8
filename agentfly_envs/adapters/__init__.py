"""Adapters that plug agentfly envs into other RL libraries (no heavy imports at package import)."""
