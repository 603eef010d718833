"""Evaluations of agctl itself: how much of what matters a compression keeps (agctl eval)."""
