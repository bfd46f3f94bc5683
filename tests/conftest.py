"""Fixtures shared by the unit tests: the book's tokenizer and held-out documents (both built by
`albert-edu prepare-data` and `albert-edu train-tokenizer`, which `make test` runs first), loaded once."""

import pytest

from albert_edu.corpus import load_documents
from albert_edu.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.load()


@pytest.fixture(scope="session")
def validation_documents() -> list:
    return load_documents("validation")


@pytest.fixture
def small_validation(monkeypatch):
    """Pre-training evaluates on 32 held-out examples per pair task instead of 512 (training.validation_examples'
    default). For the tests that train a few steps to check resuming, devices, logs and the run cache, the scores
    are not what is tested, and the full evaluation was most of their time; tests/test_training.py checks the
    default itself."""
    import albert_edu.training as training

    full = training.validation_examples
    monkeypatch.setattr(training, "validation_examples",
                        lambda *args, **kwargs: full(*args, **{**kwargs, "max_examples": 32}))
