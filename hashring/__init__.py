# SPDX-License-Identifier: Apache-2.0
"""Consistent hashing and group membership for ringfleet.

:mod:`hashring.ring` is pure computation; :mod:`hashring.membership` adapts a
tooz coordination group into the live member set the ring is computed from.
This package imports nothing else of ringfleet's.
"""
