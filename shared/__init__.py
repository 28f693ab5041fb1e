"""What the CDC subscriber and the Dagster platform both import, so that neither imports the other.

The subscriber (cdc_subscriber/) is a long-lived service without Spark or Dagster; the platform (cdc_assets/,
sensors/, spark_ops/) reads what it lands and what it reports. Modules: ``names`` (Salesforce's object API names and
record ids, as Python and Spark SQL regexes), ``markers`` (the header-only events the subscriber lands so that the
platform repairs a replica), ``subscriber_state`` (the subscriber's state folder: where it is, stream status, dead
letters), ``faults`` (the named fault points crash tests inject), ``commit_time`` (how far ahead of the clock a commit time
may be, for the subscriber's header check and the parse). It imports neither package, nor Dagster or Spark.
"""
