"""Experiment runners that reproduce the papers (fast mechanism paths)."""
