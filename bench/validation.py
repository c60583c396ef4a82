"""Which JSON Schema library validates a request body for the least CPU?

The request-validation check (``ext_authz/check/validation.py``) runs on the lean
per-request path, so the library is chosen by measurement. Candidates, all on PyPI here:

    jsonschema       the reference implementation, pure Python (the baseline)
    fastjsonschema   compiles a schema to Python source, then exec (draft 4/6/7 only)
    jsonschema_rs    Rust (PyO3); takes the parsed Python object

For one realistic schema (an order: uuid, nested address, an array of line items with a
pattern, bounds and an enum, ``additionalProperties: false`` at each level, formats on)
and its instances, each library is timed in the same run, in-process, on:

- ``valid``: a valid 0.6 KB order (``is_valid``-style: the passing request's whole cost);
- ``invalid_first_error``: an order with a wrong type deep in an item, down to the first
  error's path and keyword (what the 400 names);
- ``parse_and_validate``: ``json.loads`` of the body bytes plus ``valid``, as a check does;
- ``compile``: building the validator from the schema (done once per policy update).

Results are µs per operation (median of ``--rounds`` rounds of ``--number`` calls) and
ratios to jsonschema measured in the same run. One JSON document goes to stdout.

    .venv/bin/python -m bench.validation
    .venv/bin/python -m bench.validation --number 2000 --rounds 7
    .venv/bin/python -m bench.validation --number 50 --rounds 1     # the quickest run
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import fastjsonschema
import jsonschema
import jsonschema_rs

from bench.kit.machine import describe
from bench.kit.run import Progress, Run, add_workdir_arguments

progress = Progress("validation")

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["customerId", "items", "shipping"],
    "additionalProperties": False,
    "properties": {
        "customerId": {"type": "string", "format": "uuid"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "note": {"type": "string", "maxLength": 500},
        "giftWrap": {"type": "boolean"},
        "shipping": {
            "type": "object",
            "required": ["name", "street", "city", "postcode", "country"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 100},
                "street": {"type": "string", "minLength": 1, "maxLength": 200},
                "city": {"type": "string", "minLength": 1, "maxLength": 100},
                "postcode": {"type": "string", "pattern": "^[A-Z0-9 -]{3,10}$"},
                "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
            },
        },
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 50,
            "items": {
                "type": "object",
                "required": ["sku", "quantity"],
                "additionalProperties": False,
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4,8}$"},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
                    "unitPrice": {"type": "number", "exclusiveMinimum": 0},
                },
            },
        },
    },
}

VALID: dict[str, Any] = {
    "customerId": "9b2f6c1e-7d4a-4f0e-9a35-2c8e1b7f4d60",
    "currency": "EUR",
    "note": "Leave at the door, please.",
    "giftWrap": False,
    "shipping": {"name": "Ada Lovelace", "street": "12 St James's Square", "city": "London", "postcode": "SW1Y 4JH", "country": "GB"},
    "items": [
        {"sku": "ABC-12345", "quantity": 2, "unitPrice": 19.99},
        {"sku": "XYZ-0042", "quantity": 1, "unitPrice": 5.5},
        {"sku": "QRS-777777", "quantity": 10},
        {"sku": "DEF-1000", "quantity": 3, "unitPrice": 120.0},
    ],
}


def _invalid() -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    data["items"][3]["quantity"] = "3"
    return data


INVALID = _invalid()
BODY = json.dumps(VALID).encode()


def _jsonschema() -> tuple[Callable[[Any], bool], Callable[[Any], tuple[str, str]]]:
    validator = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)

    def first(instance: Any) -> tuple[str, str]:
        error = next(iter(validator.iter_errors(instance)))
        return ".".join(map(str, error.absolute_path)), str(error.validator)

    return validator.is_valid, first


def _fastjsonschema() -> tuple[Callable[[Any], bool], Callable[[Any], tuple[str, str]]]:
    validate = fastjsonschema.compile(SCHEMA)

    def valid(instance: Any) -> bool:
        try:
            validate(instance)
        except fastjsonschema.JsonSchemaValueException:
            return False
        return True

    def first(instance: Any) -> tuple[str, str]:
        try:
            validate(instance)
        except fastjsonschema.JsonSchemaValueException as exc:
            return ".".join(map(str, exc.path[1:])), str(exc.rule)
        raise AssertionError("valid")

    return valid, first


def _jsonschema_rs() -> tuple[Callable[[Any], bool], Callable[[Any], tuple[str, str]]]:
    validator = jsonschema_rs.validator_for(SCHEMA, validate_formats=True, offline=True)

    def first(instance: Any) -> tuple[str, str]:
        try:
            validator.validate(instance)
        except jsonschema_rs.ValidationError as exc:
            return ".".join(map(str, exc.instance_path)), str(exc.schema_path[-1])
        raise AssertionError("valid")

    return validator.is_valid, first


COMPILERS: dict[str, Callable[[], Any]] = {
    "jsonschema": lambda: jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER),
    "fastjsonschema": lambda: fastjsonschema.compile(SCHEMA),
    "jsonschema_rs": lambda: jsonschema_rs.validator_for(SCHEMA, validate_formats=True, offline=True),
}
LIBRARIES = {"jsonschema": _jsonschema, "fastjsonschema": _fastjsonschema, "jsonschema_rs": _jsonschema_rs}


def _per_call_us(call: Callable[[], object], number: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return round(statistics.median(samples), 3)


def measure(number: int, rounds: int) -> dict[str, Any]:
    results: dict[str, dict[str, float]] = {}
    agreement: dict[str, Any] = {}
    for name, build in LIBRARIES.items():
        valid, first = build()
        assert valid(VALID) and not valid(INVALID), name
        agreement[name] = first(INVALID)
        results[name] = {
            "valid": _per_call_us(lambda: valid(VALID), number, rounds),
            "invalid_first_error": _per_call_us(lambda: first(INVALID), number, rounds),
            "parse_and_validate": _per_call_us(lambda: valid(json.loads(BODY)), number, rounds),
            # Compiling is slower; a tenth of the calls.
            "compile": _per_call_us(COMPILERS[name], max(1, number // 10), rounds),
        }
    results["json_loads_only"] = {"parse": _per_call_us(lambda: json.loads(BODY), number, rounds)}
    base = results["jsonschema"]
    ratios = {
        name: {case: round(value / base[case], 4) for case, value in cases.items()}
        for name, cases in results.items()
        if name in LIBRARIES
    }
    return {
        "baseline": {"library": "jsonschema", "us_per_op": base},
        "ratios": ratios,
        "us_per_op": results,
        "first_error_found": agreement,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=1000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    add_workdir_arguments(parser)
    args = parser.parse_args(argv)
    with Run("validation", argv, args, progress) as run:
        run.report["settings"] = {"number": args.number, "rounds": args.rounds, "body_bytes": len(BODY)}
        run.report["machine"] = describe(("jsonschema", "fastjsonschema", "jsonschema-rs"), ("ext_authz",))
        results = measure(args.number, args.rounds)
    run.print(**results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
