"""msgspec records for throughput results, submission receipts and campaigns.

Every record that crosses a process or a file boundary lives here, so that the
worker, the controller, the audit and the report (and other projects) agree on
one versioned format. See `records` for the types, `codec` for strict decoding
and atomic writing, `recipe` for model recipes and their exact parameter count,
`layout` for where a campaign keeps its files and the one reader of them,
`job_accounting` for a job's accounting in the project's words (what receipts store),
`local_jobs` for the local scheduler's job registry and each job's accounting, and
`upgrade` for rewriting a campaign of the previous `SCHEMA_VERSION`.
"""

from throughput_schema.codec import SchemaError, convert_input, decode, dumps, read, read_yaml, write_atomic, write_new
from throughput_schema.outcomes import (
    EXIT_CODES,
    Cancelled,
    Capped,
    CompileError,
    Crashed,
    CudaOom,
    HostOom,
    NodeFail,
    NonFinite,
    Ok,
    Outcome,
    Refused,
    StorageFull,
    Timeout,
    outcome_kind,
)
from throughput_schema.records import *  # noqa: F403
from throughput_schema.request import WorkerRequest
from throughput_schema.version import SCHEMA_VERSION

__version__ = "0.1.0"
