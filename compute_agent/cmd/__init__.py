# SPDX-License-Identifier: Apache-2.0
"""Console-script entry points of the compute agent."""
