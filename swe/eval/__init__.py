"""Evaluating encoders: one module per job.

* :mod:`~swe.eval.encoders`: the encoder registry (the one place a spec such as
  ``potion-base-8m``, ``teacher:minilm``, ``gem:DIR`` or a model dir is parsed), with
  :mod:`~swe.eval.baselines` for the PyPI-shipped baselines;
* :mod:`~swe.eval.data`: where the data lives (``$SWE_DATA`` or ``../shared/data``);
* :mod:`~swe.eval.metrics`: Spearman, macro F1, blocked cosine top-k;
* :mod:`~swe.eval.similarity` (STS), :mod:`~swe.eval.retrieval` (Tatoeba, held-out pairs),
  :mod:`~swe.eval.mining` (BUCC-style bitext mining), :mod:`~swe.eval.classification`;
* :mod:`~swe.eval.tasks`: the task registry; :mod:`~swe.eval.report`: encoders × tasks;
* :mod:`~swe.eval.gem` (GEM pooling), :mod:`~swe.eval.speed` (speed, memory, size in a fresh
  process), :mod:`~swe.eval.analysis` (norms, components, the quality / speed plot).

The names below are numpy-only to import; heavier libraries load on demand.
"""

from swe.eval.data import data_root
from swe.eval.encoders import Encoder, load_encoder, model_files
from swe.eval.metrics import macro_f1, spearman, top_k
from swe.eval.retrieval import pair_retrieval, read_tatoeba, tatoeba
from swe.eval.similarity import read_sts, sts, sts_dir

__all__ = ["Encoder", "data_root", "load_encoder", "macro_f1", "model_files", "pair_retrieval",
           "read_sts",
           "read_tatoeba", "spearman", "sts", "sts_dir", "tatoeba", "top_k"]
