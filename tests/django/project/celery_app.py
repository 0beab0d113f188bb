"""The Celery app of the test project, configured from Django settings as projects do."""

from celery import Celery

app = Celery("project", set_as_current=False)
app.config_from_object("django.conf:settings", namespace="CELERY")
