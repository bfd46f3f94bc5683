"""pytest set-up shared by the unit tests and nbval: every chapter kernel gets the environment of the
book's runner (`albert-edu book run`), so stored outputs and fresh outputs are comparable."""

import os

from albert_edu.tools.manifest import kernel_env, load_book


def pytest_configure(config):
    book = load_book()
    os.environ.update(kernel_env(book))
    config.option.nbval_cell_timeout = book.cell_timeout_s  # one limit for nbval, the runner and the classroom
