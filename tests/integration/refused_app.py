"""Two releases of one app for the refused-schedule test (#30 item 7): ``old`` does not know
the task ``report`` (a release not rolled out yet), ``new`` does (its ``allowed_tasks``).
Both run ``tick`` every second, inline (each completion is reported). ``report`` appends a line
to the file ``GB_REPORT_FILE`` names, so the test sees it ran."""

from __future__ import annotations

import os

from goatbeat.beat import Beat

REPORT = "tests.integration.refused_app.report"


def tick() -> None:
    return None


def report() -> None:
    with open(os.environ["GB_REPORT_FILE"], "a") as out:
        out.write("ran\n")


def _release(*, knows_report: bool) -> Beat:
    settings = {"allowed_tasks": [REPORT]} if knows_report else {}
    app = Beat("memory://", submitter="inline", settings=settings)
    app.schedule(name="tick", task=tick, every="1s")
    return app


old = _release(knows_report=False)
new = _release(knows_report=True)
