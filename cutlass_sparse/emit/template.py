"""Strict ${placeholder} substitution: an unknown or unused placeholder is an error, never silent."""
from __future__ import annotations

import re
import string


def substitute(template: str, values: dict) -> str:
    wanted = {m.group(1) for m in re.finditer(r"\$\{(\w+)\}", template)}
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:
        raise KeyError(f"template placeholders missing values {sorted(missing)}, values unused {sorted(unused)}")
    return string.Template(template).substitute({k: str(v) for k, v in values.items()})
