"""A step's return value as it is stored in its record: JSON, portable, and small.

Non-finite floats become the strings "NaN", "Infinity" and "-Infinity" (the proto3 JSON mapping),
because bare NaN is not JSON and strict parsers (jq, browsers, Go) refuse the whole record. A
value that is not JSON is stored as its (shortened) repr. A value over RESULT_LIMIT_BYTES fails
the step with a message saying where large data belongs: records are read by every status,
verify and dry run.
"""

from __future__ import annotations

import json
import math
from typing import Any

RESULT_LIMIT_BYTES = 4 << 20
NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def portable_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    return NON_FINITE.get(value, value)


def portable(value: Any) -> Any:
    """`value` with every non-finite float replaced by its proto3-JSON string."""
    if isinstance(value, float):
        return portable_float(value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


def storable_result(result: Any) -> tuple[Any, str | None]:
    """(what goes in the record, None) or (None, why the step must fail)."""
    try:
        value = portable(result)
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        value = repr(result)[:2000]
        size = len(value)
    if size > RESULT_LIMIT_BYTES:
        return None, (f"the step returned {size / 2**20:.1f} MiB of JSON; a return value is kept in the step's "
                      f"record.json and must stay under {RESULT_LIMIT_BYTES >> 20} MiB. Return counts and small "
                      f"summaries, and write data as files under config.output_path")
    return value, None
