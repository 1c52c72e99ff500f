"""One folder per seed paper: its policies, its sweep scenario, its findings and its generators (mgst/papers/<paper>/).

The papers sit above the simulator, the policy registry's base and the core, and import them; nothing below
imports a paper: the policy and scenario registries list the papers' modules by name (mgst.policies,
mgst.scenarios). docs/architecture.md, "Where a new paper lands".
"""
