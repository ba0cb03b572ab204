"""Assemble jobq's versioned SQL scripts from the sources in ``sql/src/``.

``sql/src/manifest`` lists the source files, one concern each, in install
order; joined with one blank line between them and ``@VERSION@`` replaced by
``default_version`` of ``sql/jobq.control``, they are ``sql/jobq--<version>.sql``.
An upgrade template ``sql/src/upgrades/<from>--<version>.sql`` is hand-written
SQL in which a directive line brings in a definition from the sources:

    -- @function jobq.claim(text, bigint, text, interval)          CREATE FUNCTION …
    -- @replace-function jobq.claim(text, bigint, text, interval)  CREATE OR REPLACE FUNCTION …
    -- @view jobq.stats / -- @replace-view jobq.stats               the same for a view

A definition is a CREATE FUNCTION (or VIEW) with the COMMENT ON statement that
follows it, named by the COMMENT's signature. Scripts listed in
``sql/released.sha256`` are released and never rewritten.

    python3 tools/sql_assemble.py build     # write the current version's scripts (make sql)
    python3 tools/sql_assemble.py check     # exit 1 when a script is stale or a released one changed
    python3 tools/sql_assemble.py freeze    # record the current version's scripts as released
    python3 tools/sql_assemble.py where claim   # the file and line of each jobq.claim definition

Standard library only; see sql/src/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

VERSION_PLACEHOLDER = "@VERSION@"
PLACEHOLDER = re.compile(r"@[A-Z][A-Z_]*@")
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
DEFAULT_VERSION = re.compile(r"^\s*default_version\s*=\s*'([^']*)'", re.MULTILINE)
FULL_SCRIPT = re.compile(r"^jobq--(\d+\.\d+\.\d+)\.sql$")
STEP_SCRIPT = re.compile(r"^jobq--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$")
TEMPLATE = re.compile(r"^(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$")
CREATE = re.compile(r"^CREATE (OR REPLACE )?(FUNCTION|VIEW) (jobq\.\w+)[( ]")
BODY_START = re.compile(r"^AS (\$\w*\$)$")
COMMENT_ON = re.compile(r"^COMMENT ON (FUNCTION|VIEW) (jobq\.\w+(?:\([^)]*\))?)")
DIRECTIVE = re.compile(r"^-- @")
DIRECTIVE_FORM = re.compile(r"^-- @(replace-)?(function|view) (jobq\.\w+(?:\([^)]*\))?)\s*$")
DROP_FUNCTION = re.compile(r"\bDROP FUNCTION (?:IF EXISTS )?(jobq\.\w+\([^)]*\))")
HASH_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")

SRC_DIR = Path("sql/src")
MANIFEST = SRC_DIR / "manifest"
UPGRADES_DIR = SRC_DIR / "upgrades"
CONTROL = Path("sql/jobq.control")
RELEASED = Path("sql/released.sha256")
README_HINT = "see sql/src/README.md"


class SourceError(Exception):
    """The sources, a template or the released list cannot be assembled as they are."""


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a semver ``X.Y.Z`` string."""
    return tuple(int(part) for part in version.split("."))


def normalize(signature: str) -> str:
    """``jobq.f(text,  double precision)`` and ``jobq.f(text,double precision)`` alike."""
    return re.sub(r"\s*([(),])\s*", r"\1", " ".join(signature.split()))


def read_text(path: Path) -> str:
    """A file's text exactly (no newline translation)."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise SourceError(f"{path}: not UTF-8 ({error})") from None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Definition:
    """One CREATE FUNCTION or CREATE VIEW and the COMMENT ON statement after it."""

    kind: str  # "function" or "view"
    key: str  # normalized name, with argument types for a function
    text: str  # its lines, without the final newline
    origin: str  # file:line of its CREATE

    def create(self, or_replace: bool) -> str:
        """Its text with ``CREATE OR REPLACE`` when asked (and CREATE otherwise)."""
        head, rest = self.text.split("\n", 1)
        head = re.sub(r"^CREATE (OR REPLACE )?", "CREATE OR REPLACE " if or_replace else "CREATE ", head)
        return f"{head}\n{rest}"


def parse_definitions(text: str, origin: str) -> list[Definition]:
    """Every function and view definition of an SQL file, in order."""
    lines = text.split("\n")
    found: list[Definition] = []
    index = 0
    while index < len(lines):
        match = CREATE.match(lines[index])
        if not match:
            index += 1
            continue
        kind, name = match[2].lower(), match[3]
        where = f"{origin}:{index + 1}"
        end = index + 1
        if kind == "function":
            while end < len(lines) and not BODY_START.match(lines[end]):
                if lines[end].startswith("CREATE "):
                    raise SourceError(f"{where}: {name} has no body line 'AS $$' before the next CREATE")
                end += 1
            if end == len(lines):
                raise SourceError(f"{where}: {name} has no body line 'AS $$'")
            closing = BODY_START.match(lines[end])
            assert closing is not None
            tag = closing[1]
            while end < len(lines) and lines[end] != f"{tag};":
                end += 1
            if end == len(lines):
                raise SourceError(f"{where}: the body of {name} does not end with a line '{tag};'")
            end += 1
        else:
            while (
                end < len(lines) and not lines[end].startswith("COMMENT ON ") and not CREATE.match(lines[end])
            ):
                end += 1
        comment = COMMENT_ON.match(lines[end]) if end < len(lines) else None
        if comment is None or comment[1].lower() != kind or comment[2].split("(")[0] != name:
            raise SourceError(
                f"{where}: {kind} {name} must be followed by its COMMENT ON {kind.upper()} {name}…"
                f" ({README_HINT})"
            )
        last = end
        while last < len(lines) and not lines[last].rstrip().endswith(";"):
            last += 1
        if last == len(lines):
            raise SourceError(
                f"{origin}:{end + 1}: the COMMENT ON {kind.upper()} of {name} does not end with ';'"
            )
        key = normalize(comment[2])
        if kind == "function" and "(" not in key:
            raise SourceError(f"{origin}:{end + 1}: COMMENT ON FUNCTION {name} must give its argument types")
        found.append(Definition(kind, key, "\n".join(lines[index : last + 1]), where))
        index = last + 1
    return found


def purpose_comment_missing(definition: Definition) -> bool:
    """Whether a function body fails to open with a one-line purpose comment
    (the first line after BEGIN in PL/pgSQL, after ``AS $$`` in SQL)."""
    lines = definition.text.split("\n")
    body = next(i for i, line in enumerate(lines) if BODY_START.match(line))
    opening = body
    if any(line.startswith("LANGUAGE plpgsql") for line in lines[:body]):
        opening = next((i for i in range(body, len(lines)) if lines[i].strip() == "BEGIN"), body)
    following = [line.strip() for line in lines[opening + 1 :] if line.strip()]
    return not following or not following[0].startswith("--")


@dataclass(frozen=True)
class Sources:
    """The source files of sql/src in manifest order, and their definitions by key."""

    files: list[tuple[Path, str]]
    definitions: dict[str, Definition]

    @classmethod
    def load(cls, root: Path) -> Sources:
        manifest_path = root / MANIFEST
        names = [
            line.strip()
            for line in read_text(manifest_path).splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not names:
            raise SourceError(f"{manifest_path}: lists no source file")
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise SourceError(f"{manifest_path}: lists {', '.join(twice)} more than once")
        on_disk = {path.name for path in (root / SRC_DIR).glob("*.sql")}
        unlisted = sorted(on_disk - set(names))
        if unlisted:
            raise SourceError(
                f"{manifest_path}: does not list {', '.join(unlisted)} (add it, or delete the file)"
            )
        files: list[tuple[Path, str]] = []
        definitions: dict[str, Definition] = {}
        for name in names:
            path = root / SRC_DIR / name
            text = read_text(path)
            check_source_text(path, text)
            files.append((path, text))
            for definition in parse_definitions(text, str(path.relative_to(root))):
                if definition.text.startswith("CREATE OR REPLACE"):
                    raise SourceError(
                        f"{definition.origin}: a source says CREATE, not CREATE OR REPLACE"
                        " (an upgrade template chooses with @replace-function)"
                    )
                if definition.key in definitions:
                    raise SourceError(
                        f"{definition.origin}: {definition.kind} {definition.key} is defined twice"
                        f" (first at {definitions[definition.key].origin}); each is defined once"
                    )
                if definition.kind == "function" and purpose_comment_missing(definition):
                    raise SourceError(
                        f"{definition.origin}: the body of {definition.key} must open with a one-line"
                        " purpose comment (-- …) after BEGIN (PL/pgSQL) or AS $$ (SQL)"
                    )
                definitions[definition.key] = definition
        return cls(files, definitions)


def check_source_text(path: Path, text: str) -> None:
    """A source file joins cleanly: text, one final newline, no blank edges, no directives."""
    if "\r" in text:
        raise SourceError(f"{path}: has carriage returns; use Unix line ends")
    if not text.strip():
        raise SourceError(f"{path}: is empty")
    if not text.endswith("\n") or text.endswith("\n\n") or text.startswith("\n"):
        raise SourceError(
            f"{path}: must start with a non-blank line and end with exactly one newline"
            " (the assembler puts one blank line between files)"
        )
    for number, line in enumerate(text.split("\n"), start=1):
        if DIRECTIVE.match(line):
            raise SourceError(f"{path}:{number}: directives (-- @…) belong in upgrade templates only")
        for placeholder in PLACEHOLDER.findall(line):
            if placeholder != VERSION_PLACEHOLDER:
                raise SourceError(
                    f"{path}:{number}: unknown placeholder {placeholder} (only {VERSION_PLACEHOLDER})"
                )


def read_version(root: Path) -> str:
    """default_version of sql/jobq.control: the version the sources hold."""
    found = DEFAULT_VERSION.search(read_text(root / CONTROL))
    if found is None or not SEMVER.match(found[1]):
        raise SourceError(f"{root / CONTROL}: no default_version = 'X.Y.Z'")
    return found[1]


def read_released(root: Path) -> dict[str, str]:
    """sql/released.sha256 as {script name: sha256}; empty when the file is absent."""
    path = root / RELEASED
    if not path.exists():
        return {}
    released: dict[str, str] = {}
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = HASH_LINE.match(line)
        if match is None or not (FULL_SCRIPT.match(match[2]) or STEP_SCRIPT.match(match[2])):
            raise SourceError(f"{path}:{number}: expected '<sha256>  jobq--….sql' (sha256sum format)")
        released[match[2]] = match[1]
    return released


def assemble_install(sources: Sources, version: str) -> str:
    """The full install script of ``version``: the manifest's files, one blank line apart."""
    return "\n".join(text for _, text in sources.files).replace(VERSION_PLACEHOLDER, version)


def assemble_upgrade(sources: Sources, template_path: Path, version: str, previous: str | None) -> str:
    """An upgrade script: its template with every directive replaced by the
    definition it names. With ``previous`` (the text of the full script the
    step starts from), refuses a template that leaves out a definition that
    changed, or a function that is gone without a DROP FUNCTION."""
    template = read_text(template_path)
    if "\r" in template:
        raise SourceError(f"{template_path}: has carriage returns; use Unix line ends")
    out: list[str] = []
    brought: dict[str, bool] = {}
    for number, line in enumerate(template.split("\n"), start=1):
        if not DIRECTIVE.match(line):
            out.append(line)
            continue
        match = DIRECTIVE_FORM.match(line)
        if match is None:
            raise SourceError(
                f"{template_path}:{number}: unknown directive {line.strip()!r}; known:"
                " -- @function SIG, -- @replace-function SIG, -- @view NAME, -- @replace-view NAME"
            )
        or_replace, kind, key = bool(match[1]), match[2], normalize(match[3])
        definition = sources.definitions.get(key)
        if definition is None or definition.kind != kind:
            name = key.split("(")[0]
            alike = sorted(
                k for k, d in sources.definitions.items() if k.split("(")[0] == name and d.kind == kind
            )
            known = (
                f"; the sources define {', '.join(alike)}"
                if alike
                else f"; the sources define no {kind} {name}"
            )
            raise SourceError(f"{template_path}:{number}: unknown {kind} {key}{known}")
        if key in brought:
            raise SourceError(f"{template_path}:{number}: {kind} {key} is brought in twice")
        brought[key] = or_replace
        out.append(definition.create(or_replace))
    if previous is not None:
        check_upgrade_covers(
            sources, template_path, template=template, brought=brought, previous=previous, version=version
        )
    return "\n".join(out).replace(VERSION_PLACEHOLDER, version)


def check_upgrade_covers(
    sources: Sources,
    template_path: Path,
    *,
    template: str,
    brought: dict[str, bool],
    previous: str,
    version: str,
) -> None:
    """Every definition new or changed since the previous release is in the
    template; every function gone from the sources is dropped there."""
    before = {d.key: d for d in parse_definitions(previous, "previous release")}
    dropped = {normalize(sig) for sig in DROP_FUNCTION.findall(" ".join(template.split()))}
    missing = [
        key
        for key, definition in sources.definitions.items()
        if key not in brought
        and (
            key not in before
            or before[key].create(False) != definition.create(False).replace(VERSION_PLACEHOLDER, version)
        )
    ]
    if missing:
        raise SourceError(
            f"{template_path}: these definitions are new or changed since the release it upgrades"
            f" but not in it: {', '.join(missing)} (add a -- @function or -- @replace-function line each)"
        )
    gone = [key for key, d in before.items() if d.kind == "function" and key not in sources.definitions]
    undropped = [key for key in gone if key not in dropped]
    if undropped:
        raise SourceError(
            f"{template_path}: these functions are gone from the sources but not dropped:"
            f" {', '.join(undropped)} (add a DROP FUNCTION statement each)"
        )
    for key, or_replace in brought.items():
        if (
            not or_replace
            and key in before
            and key not in dropped
            and sources.definitions[key].kind == "function"
        ):
            raise SourceError(
                f"{template_path}: function {key} exists in the release it upgrades: use -- @replace-function"
            )


@dataclass(frozen=True)
class Output:
    """One script the sources assemble: its file name in sql/ and its text."""

    name: str
    text: str


def assemble_all(root: Path) -> tuple[str, list[Output]]:
    """The version the sources hold and every script they assemble for it."""
    version = read_version(root)
    sources = Sources.load(root)
    outputs = [Output(f"jobq--{version}.sql", assemble_install(sources, version))]
    earlier = sorted(
        (
            m[1]
            for p in (root / "sql").glob("jobq--*.sql")
            if (m := FULL_SCRIPT.match(p.name)) and m[1] != version
        ),
        key=version_key,
    )
    templates = sorted((root / UPGRADES_DIR).glob("*.sql")) if (root / UPGRADES_DIR).is_dir() else []
    for template in templates:
        match = TEMPLATE.match(template.name)
        if match is None:
            raise SourceError(
                f"{template}: an upgrade template is named <from>--<to>.sql, e.g. 0.4.0--0.5.0.sql"
            )
        start, target = match[1], match[2]
        if target != version:
            raise SourceError(
                f"{template}: upgrades to {target}, but the sources hold {version} ({root / CONTROL});"
                f" sql/jobq--{start}--{target}.sql is released and stays as it is: delete this template"
            )
        if version_key(start) >= version_key(target):
            raise SourceError(f"{template}: {start} is not older than {target}")
        previous_path = root / "sql" / f"jobq--{start}.sql"
        previous = read_text(previous_path) if previous_path.exists() else None
        outputs.append(
            Output(f"jobq--{start}--{target}.sql", assemble_upgrade(sources, template, version, previous))
        )
    if earlier and len(outputs) == 1:
        raise SourceError(
            f"no upgrade template to {version} in {root / UPGRADES_DIR}: add {earlier[-1]}--{version}.sql"
            f" ({README_HINT})"
        )
    return version, outputs


def refuse_released_change(root: Path, outputs: list[Output]) -> None:
    """A released script is never rewritten with other content."""
    released = read_released(root)
    for output in outputs:
        if output.name in released and sha256(output.text) != released[output.name]:
            raise SourceError(
                f"sql/{output.name} is released (listed in {RELEASED}) and the sources now assemble it"
                f" differently; a released script never changes: set default_version in {CONTROL} to the"
                f" next version and write its upgrade template ({README_HINT})"
            )


def build(root: Path, out_dir: Path | None) -> list[str]:
    """Write the current version's scripts (into sql/, or out_dir); one line of news per script."""
    _, outputs = assemble_all(root)
    target_dir = root / "sql" if out_dir is None else out_dir
    if out_dir is None:
        refuse_released_change(root, outputs)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
    news: list[str] = []
    for output in outputs:
        path = target_dir / output.name
        if path.exists() and read_text(path) == output.text:
            news.append(f"{path}: up to date")
            continue
        path.write_bytes(output.text.encode("utf-8"))
        news.append(f"{path}: written")
    return news


def check(root: Path) -> list[str]:
    """Every problem with the committed scripts: stale ones, changed released
    ones, and scripts of past versions missing from the released list."""
    problems: list[str] = []
    version, outputs = assemble_all(root)
    for output in outputs:
        path = root / "sql" / output.name
        if not path.exists() or read_text(path) != output.text:
            problems.append(
                f"{path} is stale (the sources in {SRC_DIR} assemble it differently): run make sql"
            )
    released = read_released(root)
    for name, digest in sorted(released.items()):
        path = root / "sql" / name
        if not path.exists():
            problems.append(f"{path} is listed in {RELEASED} but missing")
        elif sha256(read_text(path)) != digest:
            problems.append(f"{path} is released (listed in {RELEASED}) and has changed: put it back")
    current = {output.name for output in outputs}
    for path in sorted((root / "sql").glob("jobq--*.sql")):
        if path.name not in released and path.name not in current:
            problems.append(
                f"{path} is of a version before {version} but not in {RELEASED}:"
                f" run python3 tools/sql_assemble.py freeze before moving on, or delete it"
            )
    return problems


def freeze(root: Path) -> list[str]:
    """Record the current version's scripts in sql/released.sha256."""
    problems = check(root)
    if problems:
        raise SourceError("not frozen, fix these first:\n" + "\n".join(problems))
    _, outputs = assemble_all(root)
    released = read_released(root)
    news = [f"sql/{o.name}: {'already released' if o.name in released else 'released'}" for o in outputs]
    released.update({output.name: sha256(output.text) for output in outputs})

    def order(name: str) -> tuple[tuple[int, ...], ...]:
        return tuple(version_key(v) for v in re.findall(r"\d+\.\d+\.\d+", name))

    lines = [f"{released[name]}  {name}\n" for name in sorted(released, key=order)]
    (root / RELEASED).write_bytes(("".join(lines)).encode("utf-8"))
    return news


def where(root: Path, name: str) -> list[str]:
    """file:line and key of each definition named ``name`` (with or without ``jobq.``)."""
    wanted = name if name.startswith("jobq.") else f"jobq.{name}"
    sources = Sources.load(root)
    return [f"{d.origin}: {d.key}" for d in sources.definitions.values() if d.key.split("(")[0] == wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the checkout"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser(
        "build", help="write the current version's scripts into sql/ (make sql)"
    )
    build_parser.add_argument("--out", type=Path, help="write into this directory instead of sql/")
    commands.add_parser("check", help="exit 1 when a script is stale or a released one changed")
    commands.add_parser("freeze", help="record the current version's scripts in sql/released.sha256")
    where_parser = commands.add_parser("where", help="where a function or view is defined")
    where_parser.add_argument("name", help="e.g. claim or jobq.claim")
    args = parser.parse_args(argv)
    out: Path | None = args.out.resolve() if args.command == "build" and args.out else None
    os.chdir(args.root)  # so that every message names its file relative to the checkout
    root = Path()
    try:
        if args.command == "build":
            lines = build(root, out)
        elif args.command == "check":
            lines = check(root)
            if lines:
                print("\n".join(lines), file=sys.stderr)
                return 1
            lines = ["the SQL scripts match their sources and the released list"]
        elif args.command == "freeze":
            lines = freeze(root)
        else:
            lines = where(root, args.name)
            if not lines:
                print(f"no function or view {args.name} in {SRC_DIR}", file=sys.stderr)
                return 1
    except (SourceError, OSError) as error:
        print(f"sql_assemble: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
