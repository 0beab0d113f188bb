from goatbeat.django import DjangoRegistry, call
from tests.django.project.mail.tasks import send_email


def register(beat: DjangoRegistry) -> None:
    beat.schedule(name="ping", task=call(send_email, 42), every="5m", queue="default")
