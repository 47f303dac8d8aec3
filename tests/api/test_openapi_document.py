"""docs/openapi.yaml is well-formed as YAML and as OpenAPI: read strictly (no key twice), no key
that YAML made up from a `, ` in an unquoted flow-mapping value (`{ type: integer, description:
In a `formed` event, the group's generation }` reads a key `the group's generation`), only
keywords in its Schema Objects, and valid for openapi-spec-validator against the OpenAPI version
it declares. What the server serves is checked against it in test_openapi.py."""

from __future__ import annotations

import pytest
import yaml
from apidoc import DOC, DOC_PATH, StrictLoader
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from openapi_spec_validator.versions.consts import OPENAPIV31
from openapi_spec_validator.versions.shortcuts import get_spec_version
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

# JSON Schema 2020-12 (core, applicator, unevaluated, validation, meta-data, format, content)
# and OpenAPI 3.1's own Schema Object keywords; `x-` extensions besides.
SCHEMA_KEYWORDS = {
    *("$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary"),
    *("$comment", "$defs"),
    *("prefixItems", "items", "contains", "additionalProperties", "properties"),
    *("patternProperties", "dependentSchemas", "propertyNames", "if", "then", "else"),
    *("allOf", "anyOf", "oneOf", "not", "unevaluatedItems", "unevaluatedProperties"),
    *("type", "const", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum"),
    *("exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems"),
    *("uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties"),
    *("required", "dependentRequired"),
    *("title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples"),
    *("format", "contentEncoding", "contentMediaType", "contentSchema"),
    *("discriminator", "xml", "externalDocs", "example"),
}
ONE_SUBSCHEMA = (
    *("additionalProperties", "items", "contains", "propertyNames", "if", "then", "else"),
    *("not", "unevaluatedItems", "unevaluatedProperties", "contentSchema"),
)
LIST_OF_SUBSCHEMAS = ("prefixItems", "allOf", "anyOf", "oneOf")
MAP_OF_SUBSCHEMAS = ("properties", "patternProperties", "dependentSchemas", "$defs")
TEXT_KEYWORDS = ("title", "description", "$comment")


def test_the_document_is_strict_yaml():
    """No mapping names a key twice: PyYAML would keep the last value and say nothing."""
    assert yaml.load(DOC_PATH.read_text(), Loader=StrictLoader) == DOC
    with pytest.raises(ConstructorError, match="duplicate key 'type'"):
        yaml.load("a: { type: integer, type: string }", Loader=StrictLoader)


def keys_without_values(node, seen: set[int] | None = None):
    """(line, key) of each mapping entry whose value is YAML's implicit empty one: what
    `{ description: Modification time, seconds since the epoch }` makes of `seconds since the
    epoch` (and what a block `key:` with nothing after it makes); an explicit `null` is not."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(value, ScalarNode) and value.tag.endswith(":null") and not value.value:
                yield key.start_mark.line + 1, key.value
            yield from keys_without_values(key, seen)
            yield from keys_without_values(value, seen)
    elif isinstance(node, SequenceNode):
        for item in node.value:
            yield from keys_without_values(item, seen)


def test_every_key_has_a_value():
    """A `, ` in an unquoted value of a flow mapping ends the value there: YAML reads the rest as
    one more key, without a value. Quote such values."""
    stray = list(keys_without_values(yaml.compose(DOC_PATH.read_text(), Loader=StrictLoader)))
    assert not stray, "\n".join(
        f"{DOC_PATH.name}:{line}: {key!r} has no value" for line, key in stray
    )


def schemas(node, where: str = "#"):
    """(JSON pointer, schema) of every Schema Object in the document, each subschema too."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from schemas(item, f"{where}/{i}")
    elif isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if key in ("example", "examples"):  # data, not OpenAPI objects
                continue
            if key == "schema" or where == "#/components/schemas":
                yield from schema_and_subschemas(value, here)
            else:
                yield from schemas(value, here)


def schema_and_subschemas(schema, where: str):
    yield where, schema
    if not isinstance(schema, dict):
        return
    for key in ONE_SUBSCHEMA:
        if key in schema:
            yield from schema_and_subschemas(schema[key], f"{where}/{key}")
    for key in LIST_OF_SUBSCHEMAS:
        for i, sub in enumerate(schema.get(key, ())):
            yield from schema_and_subschemas(sub, f"{where}/{key}/{i}")
    for key in MAP_OF_SUBSCHEMAS:
        for name, sub in schema.get(key, {}).items():
            yield from schema_and_subschemas(sub, f"{where}/{key}/{name}")


def test_every_schema_has_only_keywords():
    """JSON Schema lets a schema carry any key, so the validator below lets a stray one pass:
    each key of each Schema Object is a keyword (or an `x-` extension), each schema is an object
    or a boolean, and each title, description and comment is a string."""
    found = list(schemas(DOC))
    assert any(where.startswith("#/components/schemas/") for where, _ in found)
    wrong = []
    for where, schema in found:
        if isinstance(schema, bool):
            continue
        if not isinstance(schema, dict):
            wrong.append(f"{where}: a schema is an object or a boolean, not {schema!r}")
            continue
        for key, value in schema.items():
            if not (key in SCHEMA_KEYWORDS or str(key).startswith("x-")):
                wrong.append(f"{where}: {key!r} is no schema keyword")
            elif key in TEXT_KEYWORDS and not isinstance(value, str):
                wrong.append(f"{where}/{key}: {value!r} is not a string")
    assert not wrong, "\n".join(wrong)


def test_the_document_is_valid_openapi():
    """openapi-spec-validator checks the document against the OpenAPI version it declares, each
    schema against JSON Schema's metaschema, and that each $ref resolves."""
    assert DOC["openapi"].startswith("3.1.")
    assert get_spec_version(DOC) == OPENAPIV31
    validate(DOC, cls=OpenAPIV31SpecValidator)
