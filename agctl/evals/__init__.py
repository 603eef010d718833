"""Evaluations of what agctl's context management keeps (agctl eval)."""
