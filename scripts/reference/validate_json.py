#!/usr/bin/python3
"""Checks generated JSON against its JSON Schema with the `jsonschema` package (Debian's
python3-jsonschema), independently of the C++ constraint engine.

Input (stdin): one JSON object per line, {"schema": {...}, "output": "<text>"}.
Output (stdout): one line per case, "ok" or "FAIL <reason>". Exit status 0 when all are ok.
"""
import json
import sys

import jsonschema


def check(case):
    try:
        value = json.loads(case["output"])
    except json.JSONDecodeError as e:
        return f"not JSON ({e}): {case['output']!r}"
    cls = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
    validator = cls(case["schema"], format_checker=cls.FORMAT_CHECKER)
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
