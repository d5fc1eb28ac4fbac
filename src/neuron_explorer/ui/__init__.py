"""The System Trace Viewer: a read-only web UI over a workspace of Parquet profiles (``view`` output).

It imports only ``neuron_explorer.contracts`` and ``neuron_explorer.util`` of this project: it reads
the Parquet dataset, never a capture. Modules, from the request inwards:

- ``server``: ``serve`` (bind, host checks, uvicorn) and ``python -m neuron_explorer.ui.server``.
- ``app``: ``create_app``, the JSON API's routes and error mapping.
- ``params``: request parameters, their limits, and ``BadRequest`` / ``NotFound``.
- ``workspace``: ``Workspace``, the profiles of a directory, prepared once each.
- ``profile``: ``Profile``, one prepared profile (leaves, counters, the cached window index).
- ``rows``: the grouping modes as a table, and the rows (tracks) of each.
- ``queries``: overview, windows, counters, event details, summary.
- ``flows`` (an event's flows), ``busy`` (busy shading of collapsed groups), ``area`` (area selection
  and per-collective stragglers), ``search`` (names and arguments, k of N).
- ``insights_page``: the Summary page's data (``view``'s summary.json: steps, insights) on the viewer's axis.
- ``compare_page``: compare mode's diff of two profiles (``neuron-explorer diff`` in a child process) on
  each profile's axis.
- ``wire``: 64-bit values as strings on the wire.
- ``device``: device profiles and their windows.
- ``index`` / ``index_build``: the window index (queries / building).
- ``background``: the preparations and index builds running in threads, waited for at shutdown.
- ``overview``: ``view``'s events overview, what a cold open paints from first (then the per-process
  summaries, ``ingest_summary``, then the events, ``coarse``).
- ``paths``: confinement of every path to the workspace; ``sql``: DuckDB helpers.

Submodules are imported on use (the package itself loads nothing: ``view`` imports ``ui.paths``
without Starlette installed).
"""

__all__ = ["app", "area", "busy", "compare_page", "device", "flows", "index", "index_build", "insights_page",
           "overview", "params", "paths", "profile", "queries",
           "rows", "search", "server", "sql", "wire", "workspace"]
