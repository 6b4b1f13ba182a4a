# SPDX-License-Identifier: Apache-2.0
"""Benchmarks of ringfleet; run them with ``python -m benchmarks.<name>``."""

# Before any benchmark imports oslo.messaging itself: native threads, as in
# the services (otherwise oslo.service picks eventlet and warns about it).
import conductor  # noqa: F401  (its initialiser calls use_native_threads)
