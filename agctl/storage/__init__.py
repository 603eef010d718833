"""Storage: where agctl's documents live, behind one seam (see ARCHITECTURE.md).

Nothing here knows what a turn or a rollback is; nothing above knows a path. For now the
file backend's layout is its first piece (`storage.file.layout`).
"""
