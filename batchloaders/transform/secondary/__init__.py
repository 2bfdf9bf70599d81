"""Secondary feature types, one module per type; importing this package registers them
(as built-ins: every config sees them, and their errors are ours, not a plugin's)."""
from batchloaders.transform.extend import registering
from batchloaders.transform.registry import BUILTIN

with registering(BUILTIN):
    from batchloaders.transform.secondary import boundaries as _boundaries  # noqa: F401
    from batchloaders.transform.secondary import chunk_meta as _chunk_meta  # noqa: F401
    from batchloaders.transform.secondary import const as _const  # noqa: F401
    from batchloaders.transform.secondary import length as _length  # noqa: F401
    from batchloaders.transform.secondary import mixture_source as _mixture_source  # noqa: F401
    from batchloaders.transform.secondary import segment_ids as _segment_ids  # noqa: F401
