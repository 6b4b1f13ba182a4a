# SPDX-License-Identifier: Apache-2.0
"""The ringfleet compute agent: membership, fenced node ownership, drivers."""

from conductor.common.native_threads import use_native_threads

use_native_threads()  # before any of our modules imports oslo.messaging
