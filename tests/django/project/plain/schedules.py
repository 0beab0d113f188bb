"""An app whose schedules.py predates goatbeat: no register(), so discovery skips it."""

RETENTION_DAYS = 30
