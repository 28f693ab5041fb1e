"""The table upkeep job (`jobs.py`); what upkeep does to each table is replication/upkeep/."""
