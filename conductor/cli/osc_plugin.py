# SPDX-License-Identifier: Apache-2.0
"""The ``openstack`` CLI plugin: ``openstack ringfleet node list`` & co.

python-openstackclient loads this module from the entry point
``openstack.cli.extension`` (``ringfleet``) and the commands from the group
``openstack.ringfleet.v1``: the same cliff command classes as ``ringfleet``'s
(every one but ``demo``), which call the API through :func:`make_client`
instead of RPC.  Login, clouds.yaml and the catalog are the openstack CLI's
own; the API's endpoint is the catalog's ``baremetal-fleet`` one (or the
cloud's ``baremetal_fleet_endpoint_override``).
"""

from __future__ import annotations

import argparse
from typing import Any

from conductor.cli.http_client import HttpConductorAPI
from conductor.cli.login import SERVICE_TYPE, Login, LoginError

__all__ = [
    "API_NAME",
    "API_VERSIONS",
    "API_VERSION_OPTION",
    "DEFAULT_API_VERSION",
    "build_option_parser",
    "make_client",
]

API_NAME = "ringfleet"
#: One major version of the commands (the API's own microversions are the
#: client's business, as with ``ringfleet``).
API_VERSIONS = ("1",)
DEFAULT_API_VERSION = "1"
API_VERSION_OPTION = "os_ringfleet_api_version"

#: Seconds per HTTP request (``ringfleet``'s --rpc-timeout default).
TIMEOUT = 60.0


def make_client(instance: Any) -> HttpConductorAPI:
    """The API client on the openstack CLI's session (``instance`` is its
    ``ClientManager``, logged in already)."""
    endpoint = instance.get_endpoint_for_service_type(
        SERVICE_TYPE, region_name=instance.region_name, interface=instance.interface
    )
    if not endpoint:
        raise LoginError(f"no {SERVICE_TYPE} endpoint in the service catalog")
    return HttpConductorAPI(Login(endpoint, instance.session), TIMEOUT)


def build_option_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The version option every openstack CLI plugin has."""
    parser.add_argument(
        "--os-ringfleet-api-version",
        metavar="VERSION",
        default=None,
        help=f"ringfleet commands version (only {DEFAULT_API_VERSION})",
    )
    return parser
