"""The coordinator spine, written once for every kind of entity (sessions today; deployments and
routes next): handlers over the rows in their target statuses, a judgement of what they report, the
entity's guarded writes with history, lanes under cluster-wide locks, and the loops that drive them.
"""
