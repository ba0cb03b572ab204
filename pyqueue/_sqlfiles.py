"""The packaged jobq SQL: where it lives, which versions it holds, and which
scripts lead from one version to another.

File names carry the versions, as for ``CREATE EXTENSION``:
``jobq--X.Y.Z.sql`` installs X.Y.Z from nothing, ``jobq--A--B.sql`` upgrades
an installed A to B. Nothing here touches a database.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

VERSION = re.compile(r"^\d+\.\d+\.\d+$")
FULL_SCRIPT = re.compile(r"^jobq--(\d+\.\d+\.\d+)\.sql$")
STEP_SCRIPT = re.compile(r"^jobq--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$")
DEFAULT_VERSION = re.compile(r"^\s*default_version\s*=\s*'([^']+)'", re.MULTILINE)
CONTROL_FILE = "jobq.control"


class SchemaError(Exception):
    """jobq cannot be installed or upgraded as asked; nothing was changed."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a semver ``X.Y.Z`` string."""
    return tuple(int(part) for part in version.split("."))


def packaged_sql_dir() -> Traversable:
    """The SQL shipped with pyqueue: ``pyqueue/sql`` inside a wheel, else the
    repository's ``sql/`` next to the package (checkout, editable install)."""
    inside = resources.files("pyqueue").joinpath("sql")
    if inside.is_dir():
        return inside
    checkout = Path(__file__).resolve().parent.parent / "sql"
    if checkout.is_dir():
        return checkout
    raise SchemaError(
        "the jobq SQL scripts are missing from this pyqueue installation",
        hint="Reinstall pyqueue from a wheel or run it from a checkout that has sql/.",
    )


@dataclass(frozen=True)
class Script:
    """One SQL file: a full install of ``target`` (source None) or an upgrade step."""

    name: str
    source: str | None
    target: str
    resource: Traversable

    def read(self) -> str:
        return self.resource.read_text(encoding="utf-8")


@dataclass(frozen=True)
class SqlScripts:
    """Every install and upgrade script of one SQL directory."""

    location: str
    full: dict[str, Script]
    steps: dict[tuple[str, str], Script]
    default_version: str | None

    @classmethod
    def load(cls, sql_dir: Traversable | None = None) -> SqlScripts:
        directory = packaged_sql_dir() if sql_dir is None else sql_dir
        full: dict[str, Script] = {}
        steps: dict[tuple[str, str], Script] = {}
        default: str | None = None
        for entry in directory.iterdir():
            if match := FULL_SCRIPT.match(entry.name):
                full[match[1]] = Script(entry.name, None, match[1], entry)
            elif match := STEP_SCRIPT.match(entry.name):
                steps[(match[1], match[2])] = Script(entry.name, match[1], match[2], entry)
            elif entry.name == CONTROL_FILE and (found := DEFAULT_VERSION.search(entry.read_text())):
                default = found[1]
        if not full:
            raise SchemaError(f"no jobq--X.Y.Z.sql install script in {directory}")
        return cls(str(directory), full, steps, default)

    @property
    def versions(self) -> list[str]:
        """Every version some script installs or upgrades to, oldest first."""
        found = set(self.full) | {target for _, target in self.steps}
        return sorted(found, key=version_key)

    @property
    def latest(self) -> str:
        """The version installs and upgrades aim at by default: the control
        file's default_version, else the newest version of any script."""
        return self.default_version or self.versions[-1]

    def check_known(self, version: str) -> None:
        if version not in self.versions:
            raise SchemaError(
                f"jobq {version} is not in the SQL scripts at {self.location}",
                hint=f"Known versions: {', '.join(self.versions)}.",
            )

    def upgrade_path(self, source: str, target: str) -> list[Script] | None:
        """The shortest chain of upgrade steps from source to target, each
        step going up and none past target; [] when equal, None when none."""
        if source == target:
            return []
        came_from: dict[str, Script] = {}
        todo = deque([source])
        while todo:
            current = todo.popleft()
            ahead = sorted(
                (step for (start, _), step in self.steps.items() if start == current),
                key=lambda step: version_key(step.target),
            )
            for step in ahead:
                if step.target in came_from or not (
                    version_key(current) < version_key(step.target) <= version_key(target)
                ):
                    continue
                came_from[step.target] = step
                if step.target == target:
                    path = [step]
                    while path[0].source != source:
                        assert path[0].source is not None
                        path.insert(0, came_from[path[0].source])
                    return path
                todo.append(step.target)
        return None

    def install_path(self, target: str) -> list[Script]:
        """The newest full install script at or below target that has an
        upgrade path to target, followed by that path."""
        self.check_known(target)
        candidates = sorted(
            (v for v in self.full if version_key(v) <= version_key(target)), key=version_key, reverse=True
        )
        for version in candidates:
            steps = self.upgrade_path(version, target)
            if steps is not None:
                return [self.full[version], *steps]
        raise SchemaError(
            f"no way to install jobq {target} from the scripts at {self.location}",
            hint="It needs a jobq--X.Y.Z.sql at or below that version and upgrade steps up to it.",
        )
