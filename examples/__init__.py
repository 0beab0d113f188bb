"""Example goatbeat apps (``examples.demo`` is what ``./dev demo`` runs)."""
