"""The two bundled models, loaded once per test module."""

import pytest

from csa_plan.planner.loaders.model_files import load_model


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro")


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash")
