# SPDX-License-Identifier: Apache-2.0
"""Console-script entry points: thin ``main()`` functions, nothing else."""
