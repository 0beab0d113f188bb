"""The example project; importing it loads the Celery app, as Celery's Django guide does."""

from proj.celery import app as celery_app

__all__ = ["celery_app"]
