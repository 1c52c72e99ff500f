"""Imposes an experiment's properties on a test machine: speed, CPU share, failures (testbed issue)."""
