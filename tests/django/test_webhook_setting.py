"""#32 item 3 under Django: a ``GOATBEAT["alert_webhook"]`` that cannot be used fails the start
naming the key, and the ImproperlyConfigured message shows no part of its secret."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from goatbeat.django import conf

SECRET = "/services/T0SECRET/B0SECRET/xoxb-s3cr3t"


@pytest.mark.parametrize(
    "url",
    [f"ftp://alerts:pw-s3cr3t@example.com{SECRET}", f"https://a%3Ab:pw-s3cr3t@example.com{SECRET}"],
)
def test_a_bad_webhook_is_refused_naming_the_key_and_not_the_secret(url: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.load({"alert_webhook": url})
    message = str(caught.value)
    assert "alert_webhook: " in message
    for secret in ("T0SECRET", "xoxb", "pw-s3cr3t", "/services"):
        assert secret not in message, message


def test_a_webhook_with_credentials_is_accepted() -> None:
    url = f"https://alerts:pw-s3cr3t@example.com{SECRET}"
    assert conf.load({"alert_webhook": url}).core.alert_webhook == url
