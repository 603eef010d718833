"""Reading the whole store: walking it, searching it, counting its usage, checking it."""
