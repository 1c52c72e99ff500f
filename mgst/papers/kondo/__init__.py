"""Kondo, Chien & Casanova (SC2004): the rapid-turnaround policies, the optimum, one run, its metrics, the sweep.

Also the completion curves (curves) and the claims' figures from sweeps (findings: ``python -m
mgst.papers.kondo.findings``).
"""
