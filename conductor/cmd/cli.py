# SPDX-License-Identifier: Apache-2.0
"""``ringfleet``: the operator CLI (see :mod:`conductor.cli`)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

# tooz and oslo.messaging import eventlet (never monkey-patched here), which
# warns on import: not the operator's concern.  Set before those imports.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

from conductor.cli import app  # noqa: E402

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
