"""The schema version every record carries.

Readers read records of this version only; a field added within a version gets a default,
so a record written before it still decodes. A change that an older record cannot decode
into raises the version, and `throughput-schema upgrade` rewrites a campaign of the version
before (`upgrade`).
"""

SCHEMA_VERSION = 2

# Fields that every record of this version holds but campaigns written by older tools may
# lack: `throughput-schema upgrade` fills them in (a result's worker, a local job's host),
# and a reader refuses a file without one by naming that upgrade.
UPGRADE_FILLS = frozenset({"worker", "host"})
