"""The ringfleet conductor: database, scheduler, RPC service and shared plumbing.

Also home of what every ringfleet service shares: the configuration option
groups (:mod:`conductor.conf`) and, later, the RPC plumbing and data objects.
"""
