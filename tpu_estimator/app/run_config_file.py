"""The config a run uses: --config (or MODEL_DIR/config.yaml) with the --set overrides and --model_dir, validated.

Shared by the command line (`cli.py`) and the subcommands (`commands.py`: predict's config saved in an export);
it imports no TensorFlow.
"""

import dataclasses
import os
from typing import Optional

from absl import flags

from tpu_estimator.app import config_file
from tpu_estimator.app.errors import CliError


def load(flag_values: flags.FlagValues = flags.FLAGS, config_path: Optional[str] = None) -> config_file.Config:
    """The config of --config (or `config_path`, or MODEL_DIR/config.yaml) with --set overrides and --model_dir.

    Raises:
      CliError: no config, or a validation error (its message names the file and the key path).
    """
    path = flag_values.config or config_path
    if not path and flag_values.model_dir:
        saved = os.path.join(flag_values.model_dir, "config.yaml")
        if os.path.isfile(saved):
            path = saved
    if not path:
        raise CliError(
            "--config is required: a YAML file or a built-in config name "
            f"({', '.join(config_file.builtin_config_names())}), or a --model_dir holding a config.yaml"
        )
    try:
        path = config_file.resolve_config_path(path)
        config = config_file.load_config(path, flag_values.set)
    except FileNotFoundError as e:
        raise CliError(f"--config: {e}") from None
    except ValueError as e:
        raise CliError(str(e)) from None
    if flag_values.model_dir:
        config = dataclasses.replace(config, model_dir=flag_values.model_dir)
    return config
