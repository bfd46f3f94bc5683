"""pytest set-up shared by the unit tests and nbval: every chapter kernel gets the environment of the
book's runner (`python -m albert_edu.book run`), so stored outputs and fresh outputs are comparable."""

import os

from albert_edu.book import kernel_env, load_book


def pytest_configure(config):
    os.environ.update(kernel_env(load_book()))
