"""The dialects :class:`~goatbeat.stores.store.DialectStore` runs on, one module each: how
one database answers the primitives of :mod:`goatbeat.stores.dialect`, with the named queries
of its own ``sql/<dialect>/queries.sql``. Only the stores import them (the import rules in
tests/unit/test_imports.py hold it), and a dialect imports only the core and the stores'
contract and row modules: what an operation means is never written here."""
