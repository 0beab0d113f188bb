"""A module of the tasks package that fails to import: checking a name in it must refuse it,
never raise into the scheduler loop."""

raise RuntimeError("tests.bartasks.broken cannot be imported")
