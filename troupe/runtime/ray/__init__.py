"""The Ray adapters of the runtime: placement of hosts on actors, the storage actor, tool tasks
and runners, MCP connection actors, live SQL, ingestion tasks, batch evaluation on the cluster.

Everything that imports Ray lives here; the modules of :mod:`troupe.runtime` above it do not.
"""
