"""A comparable description of everything jobq installs in a database:
tables, columns, constraints, indexes, views, functions (with bodies,
settings and privileges), triggers, types and comments. Two installs are the
same schema when their fingerprints are equal, whichever path produced them
(psql -f, CREATE EXTENSION, or an old version plus upgrade scripts)."""

from __future__ import annotations

import psycopg

FINGERPRINT_QUERIES: dict[str, str] = {
    "relations": """
        SELECT c.relname, c.relkind, coalesce(c.reloptions::text, ''), coalesce(c.relacl::text, ''),
               coalesce(obj_description(c.oid, 'pg_class'), '')
        FROM pg_class c WHERE c.relnamespace = 'jobq'::regnamespace ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity,
               coalesce(col_description(c.oid, a.attnum), '')
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = 'jobq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, a.attnum""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'jobq'::regnamespace ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'jobq' ORDER BY 1""",
    "views": """
        SELECT viewname, definition FROM pg_views WHERE schemaname = 'jobq' ORDER BY 1""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
               p.prosrc, coalesce(p.proconfig::text, ''), p.prosecdef, p.provolatile, p.proparallel,
               coalesce(p.proacl::text, ''), coalesce(obj_description(p.oid, 'pg_proc'), ''),
               pg_get_function_arguments(p.oid)
        FROM pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace ORDER BY 1, 2""",
    "triggers": """
        SELECT tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'jobq'::regnamespace AND NOT t.tgisinternal ORDER BY 1""",
    "types": """
        SELECT t.typname, t.typtype, coalesce(obj_description(t.oid, 'pg_type'), '')
        FROM pg_type t WHERE t.typnamespace = 'jobq'::regnamespace ORDER BY 1""",
    "schema": """
        SELECT nspname, coalesce(nspacl::text, ''), coalesce(obj_description(oid, 'pg_namespace'), '')
        FROM pg_namespace WHERE nspname = 'jobq'""",
}


def fingerprint(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, list[tuple[object, ...]]]:
    """Every catalog fact about schema jobq, section by section."""
    return {name: conn.execute(query).fetchall() for name, query in FINGERPRINT_QUERIES.items()}
