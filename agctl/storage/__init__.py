"""Storage: where agctl's documents live, behind one seam (see ARCHITECTURE.md).

`base.py` holds the protocols the domain may use; `memory.py` the reference backend;
`file/` the file backend (the default). Nothing here knows what a turn or a rollback is;
nothing above knows a path.
"""
