"""The config file (profiles, tools, hooks, store settings) and settings typed on a
command line."""
