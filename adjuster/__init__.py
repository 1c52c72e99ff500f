"""Imposes an experiment's properties on a test machine: CPU share (throttle.py) and failures (failures.py)."""
