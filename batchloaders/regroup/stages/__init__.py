"""The built-in regroup stages, one module each; importing this package registers them
(regroup/stage.py knows none of them, as the registry of a user's own stage would not)."""
from batchloaders.regroup.stages import plain as _plain  # noqa: F401
from batchloaders.regroup.stages import bucketing as _bucketing  # noqa: F401
from batchloaders.regroup.stages import packing as _packing  # noqa: F401
from batchloaders.regroup.stages import chunking as _chunking  # noqa: F401
from batchloaders.regroup.stages import segmenting as _segmenting  # noqa: F401
