"""Processing steps, one module per type; importing this package registers them
(as built-ins: every config sees them, and their errors are ours, not a plugin's)."""
from batchloaders.transform.extend import registering
from batchloaders.transform.registry import BUILTIN

with registering(BUILTIN):
    from batchloaders.transform.steps import cast as _cast  # noqa: F401
    from batchloaders.transform.steps import clip as _clip  # noqa: F401
    from batchloaders.transform.steps import decode_image as _decode_image  # noqa: F401
    from batchloaders.transform.steps import frame_stack as _frame_stack  # noqa: F401
    from batchloaders.transform.steps import lookup as _lookup  # noqa: F401
    from batchloaders.transform.steps import normalize as _normalize  # noqa: F401
    from batchloaders.transform.steps import one_hot as _one_hot  # noqa: F401
    from batchloaders.transform.steps import pad_to as _pad_to  # noqa: F401
    from batchloaders.transform.steps import reshape as _reshape  # noqa: F401
    from batchloaders.transform.steps import reverse as _reverse  # noqa: F401
    from batchloaders.transform.steps import slice as _slice  # noqa: F401
    from batchloaders.transform.steps import subsample as _subsample  # noqa: F401
