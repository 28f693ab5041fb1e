"""`replication_config_sensor`: replication.yaml edited since the code location loaded, said where users look.

A code location reads replication.yaml once, when it loads, and every run it starts uses that text
(`replication.config.load_location_config`): an edit takes effect when the location is reloaded (the UI's
"Reload" on the code location, or restarting `dagster dev` / `make run`), never half-way in the runs in
between. Until then this sensor's ticks say what is pending, every 30 s:

- the file as loaded: skipped, "as loaded";
- a valid edit: skipped, "changed since the code location loaded it: reload the code location to apply it";
- an invalid edit (or a file gone): the tick **fails** with the validation errors (file, key path, closest
  option) and what to do, so the mistake shows in the sensor's tick history instead of only in the reload
  dialog and dagster.log. Runs keep the loaded configuration meanwhile; replication goes on.
"""

from __future__ import annotations

import dagster as dg

from replication.config import ConfigError, LoadedConfig, parse_config

CONFIG_SENSOR = "replication_config_sensor"
RELOAD_HINT = (
    "reload the code location to apply it (Dagster UI: Deployment > Code locations > Reload, or the "
    "Reload button beside the code location; `make run` restarted also reloads)"
)


def config_tick(loaded: LoadedConfig) -> dg.SkipReason:
    """What one tick says about `loaded.path` now; raises ConfigError (the tick fails) when it is not valid."""
    try:
        text = loaded.path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"{loaded.path} is gone since the code location loaded it; runs keep the loaded "
            "configuration. Put the file back (CDC_CONFIG names it) before reloading."
        ) from None
    if text == loaded.text:
        return dg.SkipReason(f"{loaded.path} as loaded")
    try:
        parse_config(text, loaded.path)
    except ConfigError as e:
        raise ConfigError(
            f"{e}\n{loaded.path} changed since the code location loaded it and is not valid: runs "
            f"keep the configuration loaded before. Fix the file, then {RELOAD_HINT}."
        ) from None
    return dg.SkipReason(f"{loaded.path} changed since the code location loaded it: {RELOAD_HINT}")


def build_config_sensor(
    *, loaded: LoadedConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> dg.SensorDefinition:
    @dg.sensor(
        name=CONFIG_SENSOR,
        minimum_interval_seconds=30,
        default_status=default_status,
        description="replication.yaml edited since the code location loaded it: a failed tick names the "
        "errors of an invalid file; a valid edit needs a reload of the code location.",
    )
    def replication_config_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        return config_tick(loaded)

    return replication_config_sensor
