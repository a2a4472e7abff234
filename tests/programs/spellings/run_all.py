"""Runs spelling programs one after the other in this process (started by the launcher), each as `__main__`.

Usage: run_all.py WORK_DIR NAME... ; program NAME.py gets `--model_dir=WORK_DIR/NAME --results=WORK_DIR/NAME.json
--tpu=grpc://10.0.0.2:8470`. A program's exception is written to WORK_DIR/NAME.error and the next one runs.
"""

import os
import runpy
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def main(work_dir, names):
    for name in names:
        program = os.path.join(HERE, name + ".py")
        sys.argv = [
            program,
            "--model_dir=" + os.path.join(work_dir, name),
            "--results=" + os.path.join(work_dir, name + ".json"),
            "--tpu=grpc://10.0.0.2:8470",
        ]
        try:
            runpy.run_path(program, run_name="__main__")
        except Exception:
            with open(os.path.join(work_dir, name + ".error"), "w") as f:
                f.write(traceback.format_exc())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
