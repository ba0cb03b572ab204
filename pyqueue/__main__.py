"""``python -m pyqueue``: the same as the ``pyqueue`` command."""

from __future__ import annotations

import sys

from pyqueue.cli import main

if __name__ == "__main__":
    sys.exit(main())
