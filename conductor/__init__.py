"""The ringfleet conductor: database, scheduler, RPC service and operator CLI.

What the compute agent shares with it (RPC plumbing, exceptions, data
objects, the shared option groups) lives in :mod:`conductor.common`.
"""
