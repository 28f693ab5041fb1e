"""The CDC subscriber: Salesforce Pub/Sub API (gRPC) change events -> files in the landing zone.

``python -m cdc_subscriber subscribe`` runs beside Dagster as a long-lived service; ``python -m cdc_subscriber
status`` prints each stream's state. Modules: ``proto`` (stubs from ``pubsub_api.proto``), ``bitmap`` and
``decode`` (Avro change events -> CometD JSON lines), ``header`` (the header checks before landing), ``landing``
(files, write ``_name`` then rename), ``position`` (the durable replay id), ``status`` (stream states),
``dead_letters`` (events that cannot be landed), ``service`` (the stream loop), ``cli``.
"""
