"""The schema version every record carries.

Readers accept records up to this version; new fields always get defaults so
that a newer reader still decodes an older record.
"""

SCHEMA_VERSION = 1
