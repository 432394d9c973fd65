"""Where a checkout's own files are: the repository root is the package's parent (it holds geography_fixtures/ and
.git), found from the package itself, so a module's depth in the tree never moves it."""

from __future__ import annotations

from pathlib import Path

import das

CHECKOUT = Path(das.__file__).resolve().parent.parent
FIXTURES = CHECKOUT / "geography_fixtures"
