"""The `tpu-estimator` command line without installing the console script: `python scripts/tpu_estimator_cli.py`."""

from tpu_estimator.app import cli

if __name__ == "__main__":
    cli.main()
