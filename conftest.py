"""pytest set-up shared by the unit tests and nbval: every chapter kernel gets the environment of the
book's runner (`albert-edu book run`), so stored outputs and fresh outputs are comparable."""

import os

from albert_edu.tools.manifest import kernel_env, load_book


def pytest_configure(config):
    os.environ.update(kernel_env(load_book()))
