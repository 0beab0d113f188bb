"""goatbeat schema version 8: the order of code publications (``goatbeat_publication``), so a
scheduler or command running an older release's code never overwrites what a newer release
published.

Like 0001, the database runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0008_publication.sql``); the table is goatbeat's bookkeeping, read by no
model, so there is no state side.
"""

from django.db import migrations

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0007_schedule_fillfactor")]

    operations = [RunGoatbeatSQL(version=8)]
