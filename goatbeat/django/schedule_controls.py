"""The schedule admin's actions and buttons: enable, disable, run now, pause, resume and backfill,
each through the registry, each needing the change permission and leaving a History entry."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from goatbeat.core.errors import GoatbeatError, InvalidValue
from goatbeat.core.timeutil import iso_z
from goatbeat.django.admin_access import (
    registry_for_writing,
    store_for_reading,
)
from goatbeat.django.forms import (
    BackfillForm,
    PauseForm,
)
from goatbeat.django.models import Schedule as ScheduleRow


class ScheduleControls(admin.ModelAdmin):  # type: ignore[misc]
    """The actions of :class:`~goatbeat.django.schedule_admin.ScheduleAdmin` and the buttons
    on a schedule's page."""

    def _require_change(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied

    @admin.action(description="Enable selected schedules", permissions=["change"])  # type: ignore[untyped-decorator]
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])  # type: ignore[untyped-decorator]
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Any], enabled: bool) -> None:
        self._require_change(request)
        store, registry = store_for_reading(), registry_for_writing()
        names = []
        verb = "Enabled" if enabled else "Disabled"
        for row in queryset:
            try:
                before = store.get(row.name)
                registry.set_enabled(row.name, enabled)
            except GoatbeatError as exc:  # a damaged row cannot be enabled until repaired
                self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
                continue
            names.append(row.name)
            if before.enabled != enabled:
                self.log_change(request, row, f"{verb} (admin action).")
        self.message_user(request, f"{len(names)} schedule(s) {verb.lower()}: {', '.join(names)}")

    @admin.action(description="Run selected schedules now", permissions=["change"])  # type: ignore[untyped-decorator]
    def run_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._require_change(request)
        requested = [self._request_run(request, row) for row in queryset]
        done = [name for name in requested if name]
        if done:
            self.message_user(
                request,
                f"Run requested for {', '.join(done)}; the leading scheduler submits it "
                "on its next iteration.",
            )

    def _request_run(self, request: HttpRequest, row: ScheduleRow) -> str | None:
        try:
            execution = registry_for_writing().run_now(row.name)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return None
        self.log_change(request, row, f"Run requested now ({execution.idempotency_key}).")
        return str(row.name)

    # -- pause, resume, backfill -----------------------------------------------------------------

    @admin.action(description="Pause selected schedules…", permissions=["change"])  # type: ignore[untyped-decorator]
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """A page asking for the note; then each schedule is paused (who: this user)."""
        self._require_change(request)
        if "apply" not in request.POST:
            return self._control_page(request, queryset, "pause", PauseForm())
        form = PauseForm(request.POST)
        if not form.is_valid():
            return self._control_page(request, queryset, "pause", form)
        note = form.cleaned_data["note"]
        done = [row.name for row in queryset if self._pause(request, row, note)]
        if done:
            self.message_user(request, f"Paused: {', '.join(done)}.")
        return None

    def _pause(self, request: HttpRequest, row: ScheduleRow, note: str) -> bool:
        try:
            registry_for_writing().pause(row.name, note=note, by=request.user.get_username())
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return False
        self.log_change(request, row, f"Paused{': ' + note if note else ''}.")
        return True

    @admin.action(description="Resume selected schedules from now", permissions=["change"])  # type: ignore[untyped-decorator]
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._resume_all(request, queryset, catch_up=False)

    @admin.action(  # type: ignore[untyped-decorator]
        description="Resume selected schedules, catching up the pause", permissions=["change"]
    )
    def resume_catching_up(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._resume_all(request, queryset, catch_up=True)

    def _resume_all(self, request: HttpRequest, queryset: QuerySet[Any], *, catch_up: bool) -> None:
        self._require_change(request)
        done = [row.name for row in queryset if self._resume(request, row, catch_up=catch_up)]
        if done:
            self.message_user(request, f"Resumed: {', '.join(done)}.")

    def _resume(self, request: HttpRequest, row: ScheduleRow, *, catch_up: bool) -> bool:
        try:
            result = registry_for_writing().resume(row.name, catch_up=catch_up)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return False
        if not result.was_paused:
            self.message_user(request, f"{row.name} was not paused.", level=messages.WARNING)
            return False
        if catch_up:
            text = "Resumed, catching up the pause by the misfire policy."
        else:
            more = "at least " if result.skipped_is_lower_bound else ""
            text = f"Resumed from now; {more}{result.skipped} occurrence(s) of the pause skipped."
        self.log_change(request, row, text)
        return True

    @admin.action(
        description="Backfill a past range of the selected schedule…", permissions=["change"]
    )  # type: ignore[untyped-decorator]
    def backfill_schedule(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """A page asking for the range: *Preview* lists its instants (those that already ran
        included), *Backfill* asks the leader to submit the others, once each."""
        self._require_change(request)
        rows = list(queryset[:2])
        if len(rows) != 1:
            self.message_user(request, "Select one schedule to backfill.", level=messages.ERROR)
            return None
        row = rows[0]
        if "preview" not in request.POST and "apply" not in request.POST:
            return self._control_page(request, queryset, "backfill", BackfillForm())
        form = BackfillForm(request.POST)
        if not form.is_valid():
            return self._control_page(request, queryset, "backfill", form)
        apply = "apply" in request.POST
        data = form.cleaned_data
        try:
            result = registry_for_writing().backfill(
                row.name,
                start=data["start"],
                end=data["end"],
                limit=data["limit"],
                dry_run=not apply,
            )
        except InvalidValue as exc:
            form.add_error(
                {"start": "start", "end": "end", "limit": "limit"}.get(exc.field),
                ValidationError(exc.reason),
            )
            return self._control_page(request, queryset, "backfill", form)
        except GoatbeatError as exc:
            self.message_user(request, f"{row.name}: {exc}", level=messages.ERROR)
            return None
        if not apply:
            return self._control_page(request, queryset, "backfill", form, preview=result)
        self.log_change(
            request,
            row,
            f"Backfill requested: {len(result.created)} instant(s) from "
            f"{data['start'].isoformat()} to {data['end'].isoformat()}"
            f"{f', {len(result.existing)} already ran' if result.existing else ''}.",
        )
        self.message_user(
            request,
            f"Backfill of {row.name}: {len(result.created)} instant(s) requested; the leading "
            "scheduler submits them on its next iteration"
            + (f"; {len(result.existing)} already ran, not again." if result.existing else "."),
        )
        return None

    def _control_page(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        action: str,
        form: Any,
        *,
        preview: Any = None,
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": {"pause": "Pause schedules", "backfill": "Backfill"}[action],
            "opts": self.opts,
            "queryset": queryset,
            "form": form,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "preview": preview,
            "existing": {} if preview is None else preview.existing,
            "preview_rows": []
            if preview is None
            else [(iso_z(t), preview.existing.get(t)) for t in preview.instants],
        }
        return TemplateResponse(request, f"admin/goatbeat/schedule/{action}.html", context)

    # -- buttons on the schedule page -----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        extra = [
            path(
                "<path:object_id>/run/",
                self.admin_site.admin_view(self.run_view),
                name=f"{info[0]}_{info[1]}_run",
            ),
            path(
                "<path:object_id>/resume/",
                self.admin_site.admin_view(self.resume_view),
                name=f"{info[0]}_{info[1]}_resume",
            ),
        ]
        return extra + list(super().get_urls())

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The page's *Resume* button (from now, or ``catch_up`` in the POST)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if self._resume(request, obj, catch_up=bool(request.POST.get("catch_up"))):
            self.message_user(request, f"Resumed {obj.name}.")
        return HttpResponseRedirect(self._change_url(obj))

    def _change_url(self, obj: ScheduleRow) -> str:
        return reverse(  # type: ignore[no-any-return]
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[obj.pk],
            current_app=self.admin_site.name,
        )

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = get_object_or_404(self.get_queryset(request), pk=object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        if self._request_run(request, obj):
            self.message_user(request, f"Run of {obj.name} requested.")
        return HttpResponseRedirect(self._change_url(obj))

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        obj = kwargs.get("obj")
        context["goatbeat_can_run"] = obj is not None and self.has_change_permission(request, obj)
        context["goatbeat_paused"] = obj is not None and bool(obj.paused)
        context["goatbeat_page_actions"] = [
            *([] if obj is None or obj.paused else [("pause_schedules", "Pause…")]),
            ("backfill_schedule", "Backfill…"),
        ]
        return super().render_change_form(request, context, *args, **kwargs)
