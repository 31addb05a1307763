"""Ray Data helpers that shape the refinement splits: a batch-wise row filter, and the split
of a dataset into train and its last ``min(dev_max, 10%)`` rows by the seed-keyed shuffle key."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["rows_where", "split_last", "where"]


def where(ds: Any, column: str, values: list, keep: bool = True) -> Any:
    """Rows of ``ds`` whose ``column`` is (``keep``) or is not in ``values`` (batch-wise)."""
    return ds.map_batches(rows_where, batch_format="pyarrow",
                          fn_kwargs={"column": column, "values": values, "keep": keep})


def rows_where(batch: pa.Table, column: str, values: list, keep: bool) -> pa.Table:
    """Ray Data UDF: the rows whose ``column`` is (``keep``) or is not in ``values``."""
    mask = pc.is_in(batch.column(column), value_set=pa.array(values))
    return batch.filter(mask if keep else pc.invert(mask))


def split_last(ds: Any, dev_max: int) -> tuple[Any, Any, int]:
    """Sort ``ds`` by its shuffle key ``k`` (a global shuffle); the last ``min(dev_max, 10%)``
    rows are validation. Returns ``(train, dev, rows)``."""
    ds = ds.materialize()
    n = ds.count()
    n_dev = min(dev_max, n // 10)
    shuffled = ds.sort("k")
    train, dev = shuffled.split_at_indices([n - n_dev])
    return train, dev, n
