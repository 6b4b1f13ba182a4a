# SPDX-License-Identifier: Apache-2.0
"""OpenStack Placement: its options, a client, and a node as a resource provider."""
