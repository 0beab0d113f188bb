"""goatbeat's core: triggers, misfire planning, the store and submitter contracts, the lease
and the scheduler loop. Standard library only (a test enforces it)."""
