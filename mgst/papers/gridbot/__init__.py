"""GridBot (Silberstein, Sharov, Geiger and Schuster, "GridBot: Execution of Bags of Tasks in Multiple Grids"): each
bag's scheduling and replication policy written as ClassAd expressions, evaluated per request and per replication
cycle against the host, the job, the bag and the queue.

``classads``: the expression language (HTCondor's own ClassAds, imported at first use); ``ads``: the ads, built from
the core's view; ``bags``: each bag's expressions and pending replicas; ``evaluation``: a run's bags and the
evaluation of their expressions, with fallbacks, and tail detection; ``options``: the [policy] keys; ``replication``:
Algorithm 2; ``policy``: the policy, ``gridbot`` (Algorithm 1 on every request, the cycle on a timer).
"""
