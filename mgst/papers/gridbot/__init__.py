"""GridBot (Silberstein, Sharov, Geiger and Schuster, "GridBot: Execution of Bags of Tasks in Multiple Grids"): each
bag's scheduling and replication policy written as ClassAd expressions, evaluated per request and per replication
cycle against the host, the job, the bag and the queue.

``classads`` is the expression language (HTCondor's own ClassAds, imported at first use), ``ads`` builds the ads
from the core's view, ``bags`` holds each bag's expressions and replicas waiting to be sent, and ``policy`` is the
policy itself (registered as ``gridbot``): Algorithm 1 on every request, Algorithm 2 on a periodic cycle.
"""
