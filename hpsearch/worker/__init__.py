"""What runs in a trial's worker process: one trial (``_trial``: its whole life, from the
launch to its end event, whatever runs it) or a fused group (``_group``: one call of the
members function, an end per member).

The runner's trainable calls these in the worker; they call the user's code through
:mod:`hpsearch.adapters` and report through :mod:`hpsearch.trial`'s protocol.
"""

from typing import TYPE_CHECKING

from hpsearch._lazy import lazy_exports

if TYPE_CHECKING:
    from hpsearch.worker._group import execute_group
    from hpsearch.worker._hang import hang_limit
    from hpsearch.worker._limits import time_limit
    from hpsearch.worker._trial import (
        Sender,
        apply_memory_cap,
        device_of,
        execute_trial,
        final_metrics,
        limit_torch_threads,
        release_memory,
        use_gpu,
    )

__getattr__, __dir__ = lazy_exports(__name__)

__all__ = [
    "Sender",
    "apply_memory_cap",
    "device_of",
    "execute_group",
    "execute_trial",
    "final_metrics",
    "hang_limit",
    "limit_torch_threads",
    "release_memory",
    "time_limit",
    "use_gpu",
]
