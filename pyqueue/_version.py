"""pyqueue's version, in a module of its own that imports nothing, so that
any module may read it without importing the package (``pyqueue.__version__``
is this; tests/test_schema.py keeps it equal to pyproject's version)."""

from __future__ import annotations

__version__ = "0.14.0"
