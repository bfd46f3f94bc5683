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
