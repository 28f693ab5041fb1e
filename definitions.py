"""The platform's Dagster definitions, configured from the environment (see README):

CDC_CONFIG (replication.yaml), CDC_LANDING_ZONE, CDC_WAREHOUSE, CDC_SENSORS_RUNNING (1 = sensors start on).
"""

import os

from cdc_assets.defs import build_defs

defs = build_defs(sensors_running=os.environ.get("CDC_SENSORS_RUNNING") == "1")
