"""Which settings hold secrets, and what is shown in their place.

One rule for every free-form settings map (``kafka.client_config``, ``spark``,
``storage.options``) and for every librdkafka or Java client setting the runtime builds:
:func:`is_secret_key` names the keys whose values are secrets, and :data:`MASK` replaces a
secret wherever one would be shown. :mod:`pipelines.config.secrets` exports both; the runtime,
which sits below the config layer, imports them from here.
"""
from __future__ import annotations

import re

MASK = "***"

# Words that always name a secret (sasl.jaas.config, ssl.key.password, *.client.secret,
# basic.auth.user.info: "user:password", a private key's passphrase), a token
# (fs.s3a.session.token, aws_session_token; not a token endpoint's URL), key material
# (ssl.keystore.key, ssl.key.pem, azure_storage_account_key, fs.azure.account.key.<account>...);
# not a key's location, type or serializer (ssl.key.location, ssl.keystore.type, key.deserializer).
_SECRET_KEY = re.compile(r"password|passphrase|secret|credential|jaas\.config|auth[._-]user[._-]info"
                         r"|token$|(^|[._-])key$|key\.pem$|account[._-]key", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """Whether a setting (``sasl.jaas.config``, ``fs.s3a.secret.key``...) holds a secret."""
    return bool(_SECRET_KEY.search(key))
