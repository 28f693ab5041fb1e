"""What a replica holds, derived from an object's describe(): its columns, field selection and the hashing rule.

Pure metadata, shared by spark_ops/, resources/ and cdc_assets/: no Spark session, no Dagster, no I/O.
"""
