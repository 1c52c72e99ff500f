"""Kondo, Chien & Casanova (seed 003): the rapid-turnaround policies, the optimum, one run, its metrics, the sweep.

Also the completion curves (curves) and the claims' figures from sweeps (findings: ``python -m
mgst.papers.kondo.findings``).
"""
