"""Task modules the real Celery, Dramatiq and RQ workers of tests/e2e/test_backends.py load.

Each task records what it received (args, kwargs, the idempotency key as its backend delivered
it, the queue it came from) in a Redis list, so the test can check the side effects of a run.
"""
