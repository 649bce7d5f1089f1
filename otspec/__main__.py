"""``python -m otspec`` is the ``otspec`` command."""

import sys

from otspec.cli import main

sys.exit(main())
