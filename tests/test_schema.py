"""`sgdeploy schema` is a JSON Schema editors take as one: its dialect and an identity per release."""

from __future__ import annotations

from sgdeploy.profile.schema import JSON_SCHEMA_DIALECT, profile_schema


def test_the_schema_names_its_dialect_and_the_release_it_spells_out() -> None:
    schema = profile_schema("0.5.11")
    assert list(schema)[:2] == ["$schema", "$id"]
    assert schema["$schema"] == JSON_SCHEMA_DIALECT
    assert schema["$id"] == "urn:sgdeploy:profile:sglang-0.5.11" != profile_schema("0.5.23")["$id"]
    assert "tp_size" in schema["properties"]["server"]["properties"]
