"""Bulk offline encoding on Ray Data: files in, a published, resumable Parquet output out.

``encode_files`` is the job behind ``pipelines/encode.py``; ``read_output``/``output_parts`` read
the current version of an output through its manifest. See docs/bulk.md.
"""

from swe.bulk.job import EncodeSummary, encode_files
from swe.bulk.layout import output_parts, read_manifest, read_output
from swe.bulk.options import EncodeOptions

__all__ = ["EncodeOptions", "EncodeSummary", "encode_files", "output_parts", "read_manifest",
           "read_output"]
