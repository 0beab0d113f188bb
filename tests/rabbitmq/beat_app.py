"""goatbeat's side of tests/rabbitmq/test_failover.py: ``goatbeat --app
tests.rabbitmq.beat_app:beat --database ... scheduler``, sending to Celery on RabbitMQ
(``GOATBEAT_E2E_AMQP_URL``) with publisher confirms. One schedule fires every second between
``GOATBEAT_E2E_START`` and ``GOATBEAT_E2E_END`` (the same for every replica)."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.beat import Beat

app = Celery("failover", broker=os.environ["GOATBEAT_E2E_AMQP_URL"], set_as_current=False)
app.conf.task_serializer = "json"
app.conf.broker_transport_options = {"confirm_publish": True}

beat = Beat("memory://", submitter="celery", submitter_options={"app": app})
beat.schedule(
    name="tick",
    task="proj.tasks.tick",
    every="1s",
    start_at=os.environ["GOATBEAT_E2E_START"],
    end_at=os.environ["GOATBEAT_E2E_END"],
    misfire="run_all",
    queue="failover",
)
