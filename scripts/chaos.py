#!/usr/bin/env python
"""Run the chaos harness and its checker: ``scripts/chaos.py --duration 600 --seed N``.

Same as ``python -m tests.chaos.run`` (options there); needs PostgreSQL's binaries installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
