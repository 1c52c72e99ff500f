"""The discrete-event simulator: the event loop (``loop``: ``Simulation``), the availability feed, replications and
their summary (``replications``: ``run_simulation``), the event heap (and its C twin), the testbed's overheads
redrawn, and the sweep's default bag cell. Import each name from its module; the package itself imports nothing,
so that loading one of its modules (a sweep worker's ``mgst.sim.loop``) loads only what that module needs."""
