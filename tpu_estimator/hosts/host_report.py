"""What a host of a `tpu-estimator-hosts` job reports to the command: the global step its `train()` reached.

`tpu-estimator-hosts` names a file per host in `TPU_ESTIMATOR_HOST_REPORT`; `TPUEstimator.train` writes
`{"global_step": N}` there when it returns, so the command's last lines say how far each host trained. Without the
variable (every other run) nothing is written.
"""

import json
import os
from typing import Optional

REPORT_ENV = "TPU_ESTIMATOR_HOST_REPORT"


def record_trained_step(model_dir: str) -> None:
    """Writes the global step of `model_dir`'s latest checkpoint (where `train()` stopped) to the file
    `TPU_ESTIMATOR_HOST_REPORT` names; does nothing when the variable is unset.

    A report that cannot be written is skipped: it only feeds the command's summary lines.
    """
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    from tpu_estimator.estimator_core import checkpoint_step

    global_step = checkpoint_step.checkpoint_global_step(model_dir)
    if global_step is None:
        return
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"global_step": int(global_step)}, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def read_trained_step(path: str) -> Optional[int]:
    """The global step a host reported in `path` (None: it reported none, e.g. it never returned from `train()`)."""
    try:
        with open(path, encoding="utf-8") as f:
            return int(json.load(f)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
