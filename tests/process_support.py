"""Looking at processes through /proc: which are running, which mention a
path in their command line, and which descend from a pid. For tests that
stop a program and then check that it left nothing running."""

from __future__ import annotations

from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains text."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if text in cmdline:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether pid is a live process (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, before or while it was read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(root: int) -> set[int]:
    """The live processes below ``root`` (children, their children, ...)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found
