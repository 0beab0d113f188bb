"""The test project without any LOGGING of its own (Django's defaults only)."""

from tests.django.project.settings import *  # noqa: F403

del LOGGING  # noqa: F821
