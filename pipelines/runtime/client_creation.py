"""Making a confluent-kafka (librdkafka) client, with a refusal as a named condition.

librdkafka checks its settings, and loads the TLS files they name, when a client is made: a bad
setting is a ``KafkaException`` (``_INVALID_ARG``) from the constructor. ``scg validate`` offers
the same settings to librdkafka, so a loaded pipeline is refused here only when something changed
since it was loaded (a key or certificate file replaced, say). :func:`make_client` turns that into
:class:`KafkaClientRefused`: one line, exit 1, librdkafka's reason with every secret setting's
value masked.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from groupmgr.core import ExitCategory, ScgError

T = TypeVar("T")
MASK = "***"
# librdkafka settings whose values are secrets (a password, a JAAS config, an inline key, a token)
_SECRET_SETTING = re.compile(r"password|secret|jaas|token|credential|user\.info|key\.pem|keystore\.key", re.I)


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


def masked(text: str, config: Mapping[str, Any]) -> str:
    """``text`` with the value of every secret setting of ``config`` replaced by ``***``."""
    for key, value in config.items():
        if isinstance(value, str) and value and _SECRET_SETTING.search(key):
            text = text.replace(value, MASK)
    return text
