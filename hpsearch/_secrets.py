"""URLs as hpsearch shows and records them: the password in one replaced by ``***``.

A study's storage or a tracking store is often a database with a password in its URL
(``postgresql://alice:s3cret@db/optuna``). hpsearch says that URL in its error lines
and records the config as the parent run's MLflow params, which anyone who can read
the runs sees: there the password is ``***``, as SQLAlchemy renders a URL with
``hide_password``. What opens the store is given the URL as written.
"""

from __future__ import annotations

import re
from typing import Any

_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:)(?P<password>[^\s/@'\"]+)@"
)
"""A URL's ``user:password@``: the scheme, the user and its colon, then the password."""


def without_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    if "@" not in text:  # the common case, at no cost
        return text
    return _PASSWORD.sub(lambda m: f"{m['head']}***@", text)


def shown(value: Any) -> Any:
    """``value`` with :func:`without_passwords` applied to it, where it is text."""
    return without_passwords(value) if isinstance(value, str) else value
