"""agentfly_train: train agents on agentfly environments with RL, as an extension of TRL."""

from agentfly_train import quiet

quiet.install()
