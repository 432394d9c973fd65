"""`python -m das`: the same as the `das` command."""

import sys

from das.cli import main

sys.exit(main())
