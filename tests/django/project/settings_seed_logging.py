"""The test project with the Django integration seed's LOGGING recipe, verbatim."""

from tests.django.project.settings import *  # noqa: F403

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "goatbeat.core.observability.JsonFormatter"}},
    "handlers": {"goatbeat": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {"goatbeat": {"handlers": ["goatbeat"], "level": "INFO", "propagate": False}},
}
