"""The schema version every record carries.

Readers read records of this version only; a field added within a version gets a default,
so a record written before it still decodes. A change that an older record cannot decode
into raises the version, and `throughput-schema upgrade` rewrites a campaign of the version
before (`upgrade`).
"""

SCHEMA_VERSION = 2
