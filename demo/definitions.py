"""The platform's Definitions (`definitions.py`), run with the in-process executor.

Dagster's default executor starts every step of a run in its own Python process, and each of those starts its
own Spark driver (a JVM): a landing run (change_events, five replicas, five check steps) pays eleven JVM
start-ups, which on a 2-core machine takes minutes and lets queued runs pile up behind the sensors. In one
process, a run's steps share one Spark session, which is already parallel inside each step. Concurrency pools
still apply (one slot per replica table), so runs never write the same table at once.
"""

import dagster as dg

import definitions

defs = dg.Definitions.merge(definitions.defs, dg.Definitions(executor=dg.in_process_executor))
