"""The app the operations tests run real schedulers on (``tests.integration.ops_app:beat``).

One schedule every second, run inline (the inline submitter reports each completion). With
``GB_SUBMIT_FAILS=1`` every submission fails and is retried: claimed occurrences wait, the
backlog grows while the scheduler keeps its lease.
"""

from __future__ import annotations

import os
from typing import ClassVar

from goatbeat.beat import Beat
from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import Occurrence
from goatbeat.submitters.inline import InlineSubmitter


class FailingSubmitter(InlineSubmitter):
    name: ClassVar[str] = "failing"

    def submit(self, occurrence: Occurrence) -> str | None:
        raise RetryableSubmitError("broker unreachable (test)")


def tick() -> None:
    return None


beat = Beat(
    "memory://",
    submitter=FailingSubmitter() if os.environ.get("GB_SUBMIT_FAILS") else "inline",
)
beat.schedule(name="tick", task=tick, every="1s")
