"""`python -m albert_edu <command>`: the same command line as `albert-edu` (see albert_edu.tools.cli)."""

import sys

from albert_edu.tools.cli import main

sys.exit(main())
