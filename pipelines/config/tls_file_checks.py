"""Validation of a ``kafka.security`` section's TLS files by their contents, not just their presence.

:func:`check_tls_files` reads the CA, client certificate and key files (paths already checked to be
readable PEM files) and reports, on the line of the field to blame, what
:mod:`pipelines.config.client_keys` finds: a CA or certificate file without a certificate block,
a client certificate that does not parse, a key file without a usable private key, an encrypted
key without its password or with a wrong one, a key that is not the certificate's. A CA bundle's
certificates are not parsed here: whether they load is the TLS stacks' verdict, below.

:func:`check_tls_loading` then offers the files to the two TLS stacks that load them on the
driver, as the clients do, without connecting: librdkafka (a client with no brokers, given the
pipeline's ``client_config`` ``ssl.*`` settings too: ``ssl.providers``, ``ssl.engine.*``...) and
Python's ``ssl`` (kafka-python's context). What either refuses (a key too small for OpenSSL's
security level, an encryption it lacks, a CA certificate it cannot read) is ``TLS_FILE_REFUSED``,
with the library's reason. No problem's text holds key material or a password.
"""
from __future__ import annotations

import re
import ssl
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from pipelines.config.client_keys import (CERTIFICATE_FIELD, KEY_FIELD, PASSWORD_FIELD, TlsMaterialProblem,
                                          certificate_blocks, check_client_pair, read_client_certificate,
                                          read_private_key)
from pipelines.config.fields import Ctx, Section
from pipelines.config.secrets import Secret
from pipelines.config.yaml_nodes import Condition as C
from pipelines.runtime.client_creation import librdkafka_refusal, masked

CA_FIELD = "ssl_ca_location"


def check_tls_files(ctx: Ctx, sec: Section, locations: Mapping[str, str | None], key_password: Secret | None) -> None:
    """Report every problem of the CA file and of the client certificate/key pair (the two are
    checked independently); ``locations`` maps each ``ssl_*_location`` key to its resolved path."""
    with ctx.independent():
        if locations.get(CA_FIELD):
            ctx.attempt(_check_ca, sec, locations[CA_FIELD])
        if locations.get(CERTIFICATE_FIELD) and locations.get(KEY_FIELD):
            ctx.attempt(_check_client_pair, sec, locations, key_password)


def check_tls_loading(ctx: Ctx, sec: Section, locations: Mapping[str, str | None], key_password: Secret | None,
                      ssl_settings: Mapping[str, str]) -> None:
    """Fail with ``TLS_FILE_REFUSED`` on the field to blame when librdkafka (given ``ssl_settings``,
    the pipeline's other ``ssl.*`` librdkafka settings) or Python's ``ssl`` will not load the
    files."""
    password = key_password.reveal() if key_password is not None else None
    settings = _librdkafka_settings(locations, password, ssl_settings)
    for refusal in (_librdkafka_refusal, _python_ssl_refusal):
        found = refusal(locations, password, settings)
        if found is not None:
            client, field, reason = found
            line, path = sec.line_of(field)
            ctx.fail(line, path, C.TLS_FILE_REFUSED, f"{locations.get(field)}: {client} refuses it: "
                     f"{masked(reason, settings)}", field=field)


def _check_ca(ctx: Ctx, sec: Section, location: str) -> None:
    with _reported(ctx, sec, {CA_FIELD: location}):
        certificate_blocks(_read(ctx, sec, CA_FIELD, location), CA_FIELD)


def _check_client_pair(ctx: Ctx, sec: Section, locations: Mapping[str, str | None],
                       key_password: Secret | None) -> None:
    with _reported(ctx, sec, locations):
        certificate = read_client_certificate(_read(ctx, sec, CERTIFICATE_FIELD, locations[CERTIFICATE_FIELD]))
        key = read_private_key(_read(ctx, sec, KEY_FIELD, locations[KEY_FIELD]),
                               key_password.reveal() if key_password is not None else None)
        check_client_pair(certificate, key)


@contextmanager
def _reported(ctx: Ctx, sec: Section, locations: Mapping[str, str | None]) -> Iterator[None]:
    """Turns a :class:`TlsMaterialProblem` into the config error of the field it blames."""
    try:
        yield
    except TlsMaterialProblem as problem:
        if problem.field == PASSWORD_FIELD:
            line, path = sec.line_of(PASSWORD_FIELD, f"{PASSWORD_FIELD}_file")
            detail = f"{problem.detail} (ssl_key_location: {locations.get(KEY_FIELD)})"
        else:
            line, path = sec.line_of(problem.field)
            detail = f"{locations.get(problem.field)}: {problem.detail}"
        ctx.fail(line, path, problem.condition, detail, field=problem.field)


def _read(ctx: Ctx, sec: Section, field: str, location: str | None) -> bytes:
    try:
        return Path(str(location)).read_bytes()
    except OSError as exc:
        line, path = sec.line_of(field)
        ctx.fail(line, path, C.FILE_NOT_READABLE, f"{location}: {exc.strerror}")


LIBRDKAFKA_SETTINGS = {CA_FIELD: "ssl.ca.location", CERTIFICATE_FIELD: "ssl.certificate.location",
                       KEY_FIELD: "ssl.key.location"}
_LIBRDKAFKA_FAILED_SETTING = re.compile(r"(ssl\.[a-z.]+) failed:\s*")


def _librdkafka_settings(locations: Mapping[str, str | None], password: str | None,
                         ssl_settings: Mapping[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {"security.protocol": "SSL", **ssl_settings}
    settings.update({setting: locations[field] for field, setting in LIBRDKAFKA_SETTINGS.items()
                     if locations.get(field)})
    if password is not None:
        settings["ssl.key.password"] = password
    return settings


def _librdkafka_refusal(locations: Mapping[str, str | None], password: str | None,
                        settings: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(client, field, reason) when librdkafka will not make a client with ``settings``, or None."""
    reason = librdkafka_refusal(settings)
    if reason is None:
        return None
    setting = _LIBRDKAFKA_FAILED_SETTING.search(reason)
    field = next((field for field, name in LIBRDKAFKA_SETTINGS.items()
                  if setting is not None and setting.group(1) == name), KEY_FIELD)
    return "librdkafka", field, reason[setting.end():] if setting is not None else reason


def _python_ssl_refusal(locations: Mapping[str, str | None], password: str | None,
                        settings: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(client, field, reason) when Python's ``ssl`` will not load these files into a client
    context as kafka-python does, else None."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    field = CA_FIELD
    try:
        if locations.get(CA_FIELD):
            context.load_verify_locations(locations[CA_FIELD])
        field = CERTIFICATE_FIELD
        if locations.get(CERTIFICATE_FIELD):
            context.load_cert_chain(locations[CERTIFICATE_FIELD], locations[KEY_FIELD], password)
    except ssl.SSLError as exc:
        return "Python's ssl (the group member)", field, str(exc)
    return None

