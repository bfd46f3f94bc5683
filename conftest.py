"""pytest set-up shared by the unit tests and nbval: every chapter kernel gets the environment of the
book's runner (`albert-edu book run`), so stored outputs and fresh outputs are comparable; tests marked slow run
only with --slow (`make test-all`)."""

import os

import pytest

from albert_edu.tools.manifest import kernel_env, load_book


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (make test-all)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: `make test-all` (pytest --slow) runs it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    book = load_book()
    os.environ.update(kernel_env(book))
    config.option.nbval_cell_timeout = book.cell_timeout_s  # one limit for nbval, the runner and the classroom
