"""goatbeat schema version 7: ``goatbeat_schedule`` leaves half of each page free
(``fillfactor = 50``), so the second write of a claimed row is a HOT update.

Like 0001, the database runs the very SQL ``goatbeat migrate`` runs
(``sql/postgres/0007_schedule_fillfactor.sql``); a storage parameter is nothing Django's
model state describes, so there is no state side.
"""

from django.db import migrations

from goatbeat.django.operations import RunGoatbeatSQL


class Migration(migrations.Migration):
    dependencies = [("goatbeat", "0006_schedule_control")]

    operations = [RunGoatbeatSQL(version=7)]
