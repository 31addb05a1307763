"""Building a static model on Ray: a config, a generic runner, and one module per stage.

``build(load_config(path))`` runs (or resumes) corpus → sentences → vocab → selection →
extraction → pca → train_data → refine; see ``swe.build.stages``.
"""

from swe.build.config import BuildConfig, ConfigError, load_config
from swe.build.runner import build
from swe.build.stage import StageResult

__all__ = ["BuildConfig", "ConfigError", "StageResult", "build", "load_config"]
