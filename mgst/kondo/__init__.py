"""Kondo, Chien & Casanova's rapid-turnaround experiments: the optimum, one run's Experiment, its metrics."""
