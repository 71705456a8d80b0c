# tests/python: the Python module (python/) against numpy, torch and transformers. Run by CTest
# (python_module) with PYTHONPATH=build/python; torch- and transformers-based tests skip visibly
# where those are absent.
import os
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf")


@pytest.fixture(scope="session")
def hh():
    return pytest.importorskip("hedgehog", reason="the hedgehog module is not built (PYTHONPATH=build/python)")


@pytest.fixture(scope="session")
def fixture_dir():
    return lambda name: os.path.join(FIXTURES, name)
