"""Fault injection: several scheduler processes, one PostgreSQL, faults, and a checker."""
