"""JSON Schemas for satbed's input files, checked with python3-jsonschema.

The schemas hold the files' shape (keys, types, ranges) so a lab's editor can
use them too; what a value means (units, known clients and PEPs, topology
addresses) stays in the code that reads it."""

from __future__ import annotations

import functools
import json
import os

import jsonschema

from satbed.core.errors import SatbedError

HERE = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def load(name: str) -> dict:
    with open(os.path.join(HERE, f"{name}.schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def validate(doc: object, name: str) -> None:
    """Raise one SatbedError line for the most relevant violation, located by
    its path in the file (axes.rtt: [] is too short)."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(load(name)).iter_errors(doc))
    if error is None:
        return
    where = ".".join(str(p) for p in error.absolute_path) or "top level"
    message = " ".join(error.message.split())[:300]
    if error.validator == "additionalProperties" and "properties" in error.schema:
        message += f" (known: {', '.join(error.schema['properties'])})"
    raise SatbedError(f"{where}: {message}")
