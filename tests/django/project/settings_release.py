"""The test project as one release of a rolling deploy: its only schedules are those of
``tests.django.project.release_<GOATBEAT_TEST_RELEASE>``, and GOATBEAT["release"] is that
number unless ``GOATBEAT_TEST_NUMBERED`` is 0."""

import os

from tests.django.project.settings import *  # noqa: F403
from tests.django.project.settings import GOATBEAT, INSTALLED_APPS

_release = os.environ.get("GOATBEAT_TEST_RELEASE", "2")
INSTALLED_APPS = [app for app in INSTALLED_APPS if not app.startswith("tests.django.project.")] + [
    f"tests.django.project.release_{_release}"
]
GOATBEAT = {**GOATBEAT, "prune_on_publish": True}
if os.environ.get("GOATBEAT_TEST_NUMBERED", "1") == "1":
    GOATBEAT["release"] = int(_release)
