"""Helpers the tests share: plain functions, classes and constants, imported by name (``from tests.helpers.runs
import step_records``). Fixtures stay in the ``conftest.py`` nearest the tests that use them."""
