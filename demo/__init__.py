"""`make run` (`python -m demo`): the whole platform on one machine, in one process you stop with Ctrl-C.

It starts the local Salesforce emulator with a generated org (built once, kept in `.demo/org`), changes the org
in a background thread the way users and integrations do (with a few gap events, duplicate and late files, and a
rare overflow), and runs `dagster dev` with both sensors on, so the replicas in `.demo/warehouse` follow the org
on their own. Pieces the end-to-end tests reuse (the Dagster instance, the processes, the latency probe) live in
their own modules.
"""
