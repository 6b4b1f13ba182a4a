"""The ringfleet compute agent: membership, fenced node ownership, drivers."""
