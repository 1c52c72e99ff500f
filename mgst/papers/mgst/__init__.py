"""The MGST paper (Kokaly, Al-Azzoni & Down): LPAS_DG, its robustness fixes and options, and its published tables.

The allocation LP that LPAS_DG solves is shared (mgst.policies.allocation): every summary's load and the
experiment file's overload check use it too.
"""
