"""The admin: schedules (list, filters, actions, create and edit) and the execution history.

Every write goes through the project's registry (the ``Beat`` the CLI and the Python API use),
which writes through the store and logs the same goatbeat event as they do: creating
(``create_schedule``), editing (``update_schedule``), enabling and disabling (``set_enabled``),
deleting (``delete``), "run now" (``run_now``), pause, resume and backfill. So ``next_run_at``
and ``version`` follow the scheduling rules, a running scheduler is woken by NOTIFY, and an
admin enable logs ``schedule.enabled`` as a pause logs ``schedule.paused``. Actions need the change permission: Django hides them
from users without it and refuses a hand-made POST naming them, and each action checks again.
Every write leaves an entry in the object's History (Django's ``LogEntry``): an edit names
each changed field old -> new, the trigger in words; enable, disable and run now say so.

Schedule control: *Pause* (a page asking for a note; who and when are recorded), *Resume*
(from now, the pause's occurrences counted as skipped, or with catch-up by the misfire policy)
and *Backfill* (a page asking for a range, previewing its instants, then asking the leader to
submit each once) are actions, also offered on each schedule's page; they go through the
registry (``Beat.pause`` ...), need the change permission, apply to code schedules too, and
leave a History entry.

Code schedules are read-only except ``enabled``; executions are read-only history (with what
the workers reported: outcome, runtime, error; a link to the schedule; a filter by schedule).
The system's health is read-only too: the lease, the scheduler processes and their heartbeats,
and the record of missed occurrences, each page headed by the verdict of ``goatbeat status
--check``. A code
schedule this project's code no longer declares is *orphaned* (marked in the list, with a
filter): a user with the delete permission may delete it. One the code still declares cannot
be deleted here, since the next publication would recreate it; the page says so.
"""

from __future__ import annotations

from django.contrib import admin

from goatbeat.django.execution_admin import RECENT_EXECUTIONS, ExecutionAdmin
from goatbeat.django.health_admin import LeaseAdmin, MissAdmin, SchedulerProcessAdmin
from goatbeat.django.models import Execution as ExecutionRow
from goatbeat.django.models import Lease as LeaseRow
from goatbeat.django.models import Miss as MissRow
from goatbeat.django.models import Schedule as ScheduleRow
from goatbeat.django.models import SchedulerProcess as SchedulerRow
from goatbeat.django.schedule_admin import UPCOMING_COUNT, ScheduleAdmin

__all__ = [
    "ScheduleAdmin",
    "ExecutionAdmin",
    "LeaseAdmin",
    "SchedulerProcessAdmin",
    "MissAdmin",
    "UPCOMING_COUNT",
    "RECENT_EXECUTIONS",
]


admin.site.register(ScheduleRow, ScheduleAdmin)
admin.site.register(ExecutionRow, ExecutionAdmin)
admin.site.register(LeaseRow, LeaseAdmin)
admin.site.register(SchedulerRow, SchedulerProcessAdmin)
admin.site.register(MissRow, MissAdmin)
