"""Worker-side apps of tests/e2e/test_completions.py: each reports completions to the goatbeat
database named by ``GOATBEAT_DATABASE``, with the one line of setup docs/operations.md shows."""
