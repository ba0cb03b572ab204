"""``python -m pyqueue.bench``: the same as ``pyqueue bench``."""

from __future__ import annotations

import sys

from pyqueue.bench.suite import main

if __name__ == "__main__":
    sys.exit(main())
