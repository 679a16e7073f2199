"""Secret values: resolution from ``${ENV}`` references or files, and masking.

A secret never appears in a config file as a literal. It is written either as an
environment reference (``sasl_password: ${KAFKA_PASSWORD}``) or as a file
(``sasl_password_file: /run/secrets/kafka``). The resolved value is held in a
:class:`Secret`, whose ``repr``/``str`` is ``Secret(***)``; only
:meth:`Secret.reveal` returns the value.

Which keys of a free-form settings map hold secrets is :func:`is_secret_key`, and what is shown
in a secret's place is :data:`MASK` (both from :mod:`pipelines.runtime.secret_settings`, so the
runtime masks by the same rule).

Failures raise :class:`SecretError` subclasses carrying a ``condition`` and their
parameters; the config validator turns them into located ``ConfigError`` s.
No error message ever contains a secret value.
"""
from __future__ import annotations

import hmac
import re
from pathlib import Path
from typing import Any, Mapping

from groupmgr.core import ExitCategory, ScgError
# the one rule for which settings are secrets and what is shown instead (the runtime uses it too)
from pipelines.runtime.secret_settings import MASK, is_secret_key  # noqa: F401

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ENV_REF = re.compile(r"\$\{(" + _NAME + r")\}")
_ANY_REF = re.compile(r"\$\{([^}]*)\}")


class Secret:
    """A secret string. ``repr``/``str``/``format`` never show the value; ``reveal()`` does."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str = "") -> None:
        if not isinstance(value, str):
            raise TypeError("a Secret holds a string")
        self._value = value
        self.source = source  # where it came from, e.g. "env:KAFKA_PASSWORD" (never the value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))


class SecretError(ScgError):
    """A secret could not be resolved; ``condition`` names the case, ``params`` hold its parameters."""

    condition = "SECRET_ERROR"
    exit_category = ExitCategory.CONFIG

    def __init__(self, detail: str, **params: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.params = params


class InlineSecretError(SecretError):
    """A secret was written inline in the file instead of ``${ENV}`` or a ``*_file`` entry."""

    condition = "INLINE_SECRET"


class EnvVarNotSetError(SecretError):
    """A ``${NAME}`` reference names an environment variable that is not set."""

    condition = "ENV_VAR_NOT_SET"


class BadEnvReferenceError(SecretError):
    """A ``${...}`` reference is malformed."""

    condition = "BAD_VALUE"


class SecretFileNotFoundError(SecretError):
    """A ``*_file`` entry names a file that does not exist."""

    condition = "SECRET_FILE_NOT_FOUND"


class SecretFileUnreadableError(SecretError):
    """A ``*_file`` entry names a file that cannot be read."""

    condition = "SECRET_FILE_UNREADABLE"


def _lookup(name: str, env: Mapping[str, str]) -> str:
    if name not in env:
        raise EnvVarNotSetError(f"environment variable {name} is not set", var=name)
    return env[name]


def env_secret(text: str, env: Mapping[str, str], field: str, file_option: bool = True) -> Secret:
    """The secret named by ``text``, which must be exactly ``${NAME}``; anything else is inline.

    ``file_option`` says whether the message may suggest ``<field>_file`` as the alternative.
    """
    match = _ENV_REF.fullmatch(text.strip())
    if match is None:
        alternative = f" or {field}_file: /path" if file_option else ""
        raise InlineSecretError(
            f"{field} is a secret and must not be written inline; use ${{ENV_VAR}}{alternative}", field=field)
    name = match.group(1)
    return Secret(_lookup(name, env), source=f"env:{name}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every ``${NAME}`` replaced from ``env`` (for non-secret strings)."""
    for match in _ANY_REF.finditer(text):
        if not re.fullmatch(_NAME, match.group(1)):
            raise BadEnvReferenceError(
                f"bad environment reference {match.group(0)!r}; use ${{NAME}} with NAME [A-Za-z_][A-Za-z0-9_]*",
                reference=match.group(0))
    return _ENV_REF.sub(lambda m: _lookup(m.group(1), env), text)


MAX_SECRET_FILE_BYTES = 64 * 1024  # a password or token; a file larger is not one


def file_secret(path: Path) -> Secret:
    """The contents of ``path`` without trailing newlines, as a Secret. Only a regular file of at
    most :data:`MAX_SECRET_FILE_BYTES` is read (``/dev/zero`` or a FIFO would never end)."""
    try:
        if path.exists() and not path.is_file():
            raise SecretFileUnreadableError(f"secret file {path} is not a regular file", secret_file=str(path))
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_FILE_BYTES + 1)
        if len(data) > MAX_SECRET_FILE_BYTES:
            raise SecretFileUnreadableError(f"secret file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes",
                                            secret_file=str(path))
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SecretFileNotFoundError(f"secret file {path} does not exist", secret_file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileUnreadableError(
            f"cannot read secret file {path}: {type(exc).__name__}", secret_file=str(path)) from None
    return Secret(text.rstrip("\r\n"), source=f"file:{path}")


def mask(value: Any) -> Any:
    """``value`` with every Secret replaced by ``"***"`` (recursing into dicts, lists and tuples)."""
    if isinstance(value, Secret):
        return MASK
    if isinstance(value, Mapping):
        return {key: mask(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(item) for item in value]
    return value


def reveal(value: str | Secret) -> str:
    """The plain string of a setting that may or may not be a Secret."""
    return value.reveal() if isinstance(value, Secret) else value
