"""Fields a deployment sets and a run may not change: which org, which Spark, which bucket and folder.

Dagster turns every value a resource is constructed with into a default of its run config, so whoever may launch a
run (the launchpad, the GraphQL API) could otherwise point it at another org (`instance_url`, a credential), another
Spark (`spark_config`'s `spark.remote`, or jars and JVM options that run code), another bucket (`storage_options`,
`root`) or another landing zone (`path`), and have the code location's credentials and the org's rows go there.

A resource class lists those fields in `DEPLOYMENT_FIELDS`; they are left out of its run config schema, so the
launchpad does not offer them and Dagster refuses a run config naming one before the run starts ("unexpected config
entry" with the field's name). Every other field stays a default a run may override (timeouts, merge tuning). The
values come from what the code location was built with: `dg.EnvVar`s resolved in the run's process, as Dagster's
config system resolves the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import dagster as dg
from dagster._config.pythonic_config.resource import ConfigurableResourceFactory
from dagster._core.definitions.definition_config_schema import DefinitionConfigSchema


class DeploymentOwned(dg.ConfigurableResource):
    """A resource whose `DEPLOYMENT_FIELDS` the run config cannot set (module docstring)."""

    DEPLOYMENT_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @property
    def _config_schema(self) -> DefinitionConfigSchema:
        field = super()._config_schema.as_field()
        launchable = {
            name: inner for name, inner in field.config_type.fields.items() if name not in self.DEPLOYMENT_FIELDS
        }
        if not field.default_provided:
            return DefinitionConfigSchema(dg.Field(dg.Shape(launchable)))
        # The values the resource was constructed with are the schema's default as a whole (each field's own default
        # is its class default): kept, less the deployment's, so a run without config runs with them.
        default = {k: v for k, v in field.default_value.items() if k not in self.DEPLOYMENT_FIELDS}
        return DefinitionConfigSchema(dg.Field(dg.Shape(launchable), default_value=default))

    def _with_updated_values(self, values: Mapping[str, Any] | None) -> ConfigurableResourceFactory:
        own = self._get_non_default_public_field_values()
        fixed = {
            name: value.get_value() if isinstance(value, dg.EnvVar) else value
            for name, value in own.items()
            if name in self.DEPLOYMENT_FIELDS
        }
        return super()._with_updated_values({**(values or {}), **fixed})
