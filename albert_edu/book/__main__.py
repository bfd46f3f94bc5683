"""`python -m albert_edu.book ...` runs `albert-edu book ...`."""

import sys

from albert_edu.tools.cli import main

sys.exit(main(["book", *sys.argv[1:]]))
