# SPDX-License-Identifier: Apache-2.0
"""What the conductor and the compute agent share: RPC plumbing, the wire's
exceptions and data objects, the shared option groups, process start-up.

The rule (enforced by ``tests/unit/test_layering.py``): modules here import
only :mod:`hashring` and third-party libraries, never the conductor's service
code nor :mod:`compute_agent`, so either service can use them without pulling
in the other.
"""
