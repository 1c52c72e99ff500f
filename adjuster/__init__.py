"""Imposes an experiment's properties on a test machine: CPU share (the throttle package) and failures (failures.py)."""
