# SPDX-License-Identifier: Apache-2.0
"""The conductor's side of an agent's state reports: store them, say what did not apply.

A report is fenced by the epoch the agent holds the node at
(:func:`conductor.db.node_states.record_node_states`).  One that did not
apply is either a node deleted while the agent held it (the agent forgets
it: ``gone``) or one it no longer holds at that epoch (a takeover it has
not read yet), and each kind is said once per report.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from conductor.db import node_states, ownership
from conductor.db.engine import Database

__all__ = ["record"]

LOG = logging.getLogger(__name__)


def record(db: Database, agent: str, reports: Sequence[node_states.StateReport]) -> dict[str, Any]:
    """Store ``agent``'s checked ``reports``; the reply of ``report_node_states``."""
    recorded = node_states.record_node_states(db, agent, reports)
    stale = recorded.stale
    # Rare (a takeover not yet read, a deleted node): one more read then.
    known = ownership.ownership_of(db, stale) if stale else {}
    gone = [node for node in stale if node not in known]
    if gone:
        LOG.info(
            "Agent %s reported %d nodes deleted since it claimed them; it forgets them: %s",
            agent,
            len(gone),
            ", ".join(gone[:20]),
        )
    if len(gone) < len(stale):
        others = [node for node in stale if node in known]
        LOG.warning(
            "Agent %s reported %d nodes it does not own at that epoch: %s",
            agent,
            len(others),
            ", ".join(others[:20]),
        )
    changed = recorded.changed_at
    return {
        "accepted": len(reports) - len(stale),
        "stale": stale,
        "gone": gone,
        "changed_at": None if changed is None else changed.isoformat(),
    }
