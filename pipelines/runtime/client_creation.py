"""Making a confluent-kafka (librdkafka) client, with a refusal as a named condition.

librdkafka checks its settings, and loads the TLS files they name, when a client is made: a bad
setting is a ``KafkaException`` (``_INVALID_ARG``) from the constructor. ``scg validate`` offers
the same settings to librdkafka, so a loaded pipeline is refused here only when something changed
since it was loaded (a key or certificate file replaced, say). :func:`make_client` turns that into
:class:`KafkaClientRefused`: one line, exit 1, librdkafka's reason with every secret setting's
value masked. :func:`librdkafka_refusal` asks librdkafka, without connecting, whether it would
make a client with given settings: ``scg validate``'s checks of ``client_config`` and of the TLS
files use it. Secret settings are those of :func:`pipelines.runtime.secret_settings.is_secret_key`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from groupmgr.core import ExitCategory, ScgError
from pipelines.runtime.secret_settings import MASK, is_secret_key

T = TypeVar("T")


class KafkaClientRefused(ScgError):
    """librdkafka refused to make a client with the pipeline's settings (exit 1: the files or
    settings must be fixed; ``scg validate`` names which)."""

    condition = "KAFKA_CLIENT_REFUSED"
    exit_category = ExitCategory.RUNTIME


def make_client(factory: Callable[[dict], T], config: Mapping[str, Any]) -> T:
    """``factory(config)``, or :class:`KafkaClientRefused` when librdkafka refuses ``config``."""
    from confluent_kafka import KafkaException

    try:
        return factory(dict(config))
    except KafkaException as exc:
        error = exc.args[0]
        reason = error.str() if hasattr(error, "str") else str(error)
        raise KafkaClientRefused(
            f"confluent-kafka (librdkafka) refuses the pipeline's Kafka settings: {masked(reason, config)}; "
            "`scg validate FILE` names the field") from None


def librdkafka_refusal(settings: Mapping[str, Any]) -> str | None:
    """Why librdkafka refuses to make a client with ``settings`` (an unknown name, a bad value, a
    TLS file it cannot load), secret settings' values masked; None when it makes one. The client
    is a consumer with no brokers, closed at once: nothing connects."""
    from confluent_kafka import Consumer, KafkaException

    config = {"group.id": "scg-validate", "log_level": 0, **settings}
    try:
        Consumer(config).close()
    except KafkaException as exc:
        error = exc.args[0]
        return masked(error.str() if hasattr(error, "str") else str(error), config)
    return None


def masked(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret setting of ``config`` replaced by ``***``."""
    for key, value in config.items():
        if isinstance(value, str) and value and is_secret_key(key):
            text = text.replace(value, MASK)
    return text
