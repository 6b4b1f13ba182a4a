# SPDX-License-Identifier: Apache-2.0
"""OpenStack Placement: a client, and a node as a resource provider.

Its options, ``[placement]``, are with every other option, in
:mod:`conductor.common.conf.placement`.
"""
