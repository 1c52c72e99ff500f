"""Comparisons over runs: the testbed against the simulation for one setting (compare). The papers' own
findings and tables are in mgst/papers/<paper>/."""
