#!/usr/bin/env python
"""manage.py of the test project (the db_worker subprocess runs it)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
