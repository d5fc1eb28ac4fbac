"""Small DuckDB helpers shared by the profile, query and device modules.

File paths enter SQL text as literals because ``read_parquet`` needs them at planning time; they are
only ever paths the server enumerated itself (``paths.table_files`` / ``paths.single_file``), never
request text, which is always bound as a parameter.
"""

from __future__ import annotations

from typing import Any

import duckdb


def quote(s: str) -> str:
    """SQL string literal (for file paths we enumerated ourselves, never for request text)."""
    return "'" + s.replace("'", "''") + "'"


def files_sql(files: list[str]) -> str:
    """A list literal of Parquet files for ``read_parquet``."""
    return "[" + ",".join(quote(f) for f in files) + "]"


def plain(v: Any) -> Any:
    """A value JSON can carry as is (numbers, strings, null); anything else (dates, decimals) as text."""
    return v if isinstance(v, (int, float, str)) or v is None else str(v)


def records(c: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rows of the cursor's last query as dicts by column name."""
    cols = [d[0] for d in c.description]
    return [dict(zip(cols, r)) for r in c.fetchall()]
