"""Developer tools of the jobq repository, run from its root (python tools/NAME.py)."""
