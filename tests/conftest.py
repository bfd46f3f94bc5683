"""Fixtures shared by the unit tests: the book's tokenizer and held-out documents (both built by
`albert-edu prepare-data` and `albert-edu train-tokenizer`, which `make test` runs first), loaded once."""

from pathlib import Path

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


@pytest.fixture
def prepared_copy():
    """make(data, train=None): a data directory `data` whose prepared training split is the book's held-out one
    (small) or the bytes `train`, with the book's held-out split and tokenizer: enough for load_documents,
    train_tokenizer and pretrain to read damaged or empty data."""
    from albert_edu.corpus import DATA_DIR

    def make(data: Path, train: bytes | None = None) -> Path:
        (data / "prepared").mkdir(parents=True)
        held_out = (DATA_DIR / "prepared" / "validation.jsonl").read_bytes()
        (data / "prepared" / "train.jsonl").write_bytes(held_out if train is None else train)
        (data / "prepared" / "validation.jsonl").write_bytes(held_out)
        (data / "prepared" / "stats.json").write_text('{"train": "the held-out split"}\n')
        (data / "tokenizer").symlink_to(DATA_DIR / "tokenizer")
        return data

    return make
