"""Task modules for tests/e2e/test_idempotency.py: each backend has a task guarded by
goatbeat.idempotency and the same task unguarded. Both record every run of their body in a
Redis list (tests/e2e/backend_apps/_record.py), the side effect the test counts. The ledger is
the database named by ``GOATBEAT_E2E_LEDGER``."""

LEDGER_ENV = "GOATBEAT_E2E_LEDGER"
