"""The app the operations tests run real schedulers on (``tests.integration.ops_app:beat``).

One schedule every second, run inline (the inline submitter reports each completion). With
``GB_SUBMIT_FAILS=1`` every submission fails and is retried: claimed occurrences wait, the
backlog grows while the scheduler keeps its lease. With ``GB_SUBMIT_HANGS=1`` the first
submission never returns (a broker call that hangs): the loop is wedged while the process, and
its HTTP server, still run.
"""

from __future__ import annotations

import os
import threading
from typing import ClassVar

from goatbeat.beat import Beat
from goatbeat.core.errors import RetryableSubmitError
from goatbeat.core.model import Occurrence
from goatbeat.submitters.inline import InlineSubmitter


class FailingSubmitter(InlineSubmitter):
    name: ClassVar[str] = "failing"

    def submit(self, occurrence: Occurrence) -> str | None:
        raise RetryableSubmitError("broker unreachable (test)")


class HangingSubmitter(InlineSubmitter):
    name: ClassVar[str] = "hanging"

    def submit(self, occurrence: Occurrence) -> str | None:
        threading.Event().wait()  # forever
        return None


def tick() -> None:
    return None


def _submitter() -> InlineSubmitter | str:
    if os.environ.get("GB_SUBMIT_FAILS"):
        return FailingSubmitter()
    if os.environ.get("GB_SUBMIT_HANGS"):
        return HangingSubmitter()
    return "inline"


beat = Beat("memory://", submitter=_submitter())
beat.schedule(name="tick", task=tick, every="1s")
