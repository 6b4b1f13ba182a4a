# SPDX-License-Identifier: Apache-2.0
"""The conductor's RPC endpoints, one module per responsibility.

Every method validates its payload first (invalid input changes nothing and
names the field), takes and returns primitives only, and is documented in
``docs/rpc-api.rst``.  The client side is :mod:`conductor.rpcapi`.
"""
