# SPDX-License-Identifier: Apache-2.0
"""The operator CLI ``ringfleet`` (cliff, OpenStack-client conventions).

Commands are cliff commands registered under the ``ringfleet.cli`` entry
point namespace, one module per noun (fleet, ring, node, flavor, instance,
agent).  :mod:`conductor.cli.app` holds the application: ``--config-file``,
output formats, and the lazily built conductor RPC client.
"""
