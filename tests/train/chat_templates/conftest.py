"""Tokenizers of a family's template and of no family's, shared by the chat-template tests."""

import pytest

from tests.train.chat_templates.test_families import family_tokenizer

PLAIN = "{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}"
"""A chat template of no family, which shows no tools."""


@pytest.fixture(scope="module")
def qwen3():
    return family_tokenizer("qwen3")


@pytest.fixture(scope="module")
def plain():
    tokenizer = family_tokenizer("qwen3")
    tokenizer.chat_template = PLAIN
    return tokenizer
