"""The neutral state layer: what both the API side and the coordinators need to read and write.

Guarded status transitions with their history (`session_writes`, `kernel_writes`), the session read
model handlers work on (`session_reads`), derived occupancy (`occupancy`) and quotas (`quota`).
It imports only `common`, `db` and `bus`; `manager` and `orchestrator` both build on it and never on
each other (tests/test_layering.py keeps it so).
"""
