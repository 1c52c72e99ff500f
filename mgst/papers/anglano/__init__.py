"""Anglano & Canonico (Bags of Tasks): the Bag-of-Tasks schedulers, WQR-FT, the sweep scenario and its five findings.

The bag metrics (AVT, makespan, waiting time, RWT) are every bag run's (mgst.bot_metrics) and the sweep's
default cell is the simulator's (mgst.sim.bag_cell): both sit below this folder.
"""
