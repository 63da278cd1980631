"""``python -m raygroups.actors``: the ``raygroups`` command (see cli.py)."""
import sys

from .cli import main

sys.exit(main())
