#!/usr/bin/python3
"""Checks generated JSON against its JSON Schema with the `jsonschema` package (Debian's
python3-jsonschema), independently of the C++ constraint engine.

Input (stdin): one JSON object per line, {"schema": {...}, "output": "<text>"}.
Output (stdout): one line per case, "ok" or "FAIL <reason>". Exit status 0 when all are ok.
"""
import json
import sys

import jsonschema


def utf16_units(text):
    return len(text.encode("utf-16-le")) // 2


def utf16_lengths(cls):
    """The same validator with minLength/maxLength counted as JavaScript's String.length does
    (zod 3 and most JavaScript code), where a character past U+FFFF counts twice."""

    def min_length(validator, bound, instance, schema):
        if validator.is_type(instance, "string") and utf16_units(instance) < bound:
            yield jsonschema.ValidationError(f"{instance!r} is shorter than {bound} UTF-16 units")

    def max_length(validator, bound, instance, schema):
        if validator.is_type(instance, "string") and utf16_units(instance) > bound:
            yield jsonschema.ValidationError(f"{instance!r} is longer than {bound} UTF-16 units")

    return jsonschema.validators.extend(cls, {"minLength": min_length, "maxLength": max_length})


def check(case):
    try:
        value = json.loads(case["output"])
    except json.JSONDecodeError as e:
        return f"not JSON ({e}): {case['output']!r}"
    cls = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
    # JSON Schema counts string lengths in code points; the output must satisfy both counts.
    for kind in (cls, utf16_lengths(cls)):
        validator = kind(case["schema"], format_checker=cls.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            return f"{errors[0].message} at {list(errors[0].path)}: {case['output']!r}"
    return None


def main():
    bad = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        reason = check(json.loads(line))
        print("ok" if reason is None else "FAIL " + reason)
        bad += reason is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
