"""A turn and its agent loop: what a model call needs, the request, the reply, tool calls
and hooks; and what else sends to a model (compression, merges, transcript replay)."""
