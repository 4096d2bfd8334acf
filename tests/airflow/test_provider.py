"""Provider registration: Airflow lists the provider and its `delta` connection type, reads the
connection form, and every module the provider info names imports."""

from __future__ import annotations

import json

from tests.airflow.conftest import airflow_command


def test_provider_is_registered_with_the_delta_connection_type(airflow_db) -> None:
    providers = airflow_command("providers", "list", "--output", "json")
    assert providers.returncode == 0, providers.stderr
    listed = {p["package_name"]: p for p in json.loads(providers.stdout)}
    assert "airflow-delta" in listed
    hooks = airflow_command("providers", "hooks", "--output", "json")
    assert hooks.returncode == 0, hooks.stderr
    by_type = {h["connection_type"]: h for h in json.loads(hooks.stdout)}
    assert by_type["delta"]["class"] == "airflow_delta.hooks.delta.DeltaHook"
    assert by_type["delta"]["package_name"] == "airflow-delta"


def test_connection_form_behaviour_is_read_by_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    behaviour = ProvidersManager().field_behaviours["delta"]
    assert behaviour["hidden_fields"] == ["schema", "port"]
    assert behaviour["relabeling"]["extra"] == "Storage options (JSON, passed to fsspec)"


def test_provider_info_names_modules_that_import() -> None:
    import importlib

    from airflow_delta.provider import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-delta"
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for conn in info["connection-types"]:
        module, _, name = conn["hook-class-name"].rpartition(".")
        assert getattr(importlib.import_module(module), name).conn_type == conn["connection-type"]
