"""Hostile config values: every field's type, range and meaning are declared once (dataclass field
metadata) and every value a user can type is either accepted within its declaration or refused
with one line naming the key. Property-based (hypothesis), fast: no paths are checked."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swe.build.config import (
    BuildConfig,
    ConfigError,
    describe,
    field_problem,
    load_config,
    markdown_table,
)

QUICK = "pipelines/configs/quickstart.toml"
SECTIONS = [type(f.default_factory()) for f in dataclasses.fields(BuildConfig)
            if f.default_factory is not dataclasses.MISSING
            and dataclasses.is_dataclass(f.default_factory())]


def _all_fields():
    from swe.build.stages.corpus import CorpusConfig
    from swe.build.stages.train_data import PairsConfig

    for cls in [BuildConfig, *SECTIONS, CorpusConfig, PairsConfig]:
        for f in dataclasses.fields(cls):
            if f.type in ("int", "float", "bool", "str", "list[str]"):
                yield cls, f


def test_every_field_is_declared_with_a_meaning_and_its_default_is_valid():
    for cls, f in _all_fields():
        assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help in its metadata"
        default = getattr(cls(), f.name)
        if f.name not in ("output",):  # output is given by --output
            assert field_problem(f, default) is None, (cls.__name__, f.name, default)


@pytest.mark.parametrize(("item", "needle"), [
    ("pca.dim=-5", "pca.dim = -5 should be >= 1"),
    ("pca.dim=0", "pca.dim = 0 should be >= 1"),
    ("vocab.size=300.7", "vocab.size = 300.7 should be int"),
    ("vocab.size=nan", "vocab.size = nan should be int"),
    ("extraction.actors=-2", "extraction.actors = -2 should be >= 0"),
    ("corpus.en.paths=[1]", "corpus.en.paths = [1] should be a list of str (item 0 is int)"),
    ("extraction.cpus_per_actor=-1", "extraction.cpus_per_actor = -1 should be 0 or >= 0.0001"),
    ("extraction.gpus_per_actor=-1", "extraction.gpus_per_actor = -1 should be 0 or >= 0.0001"),
    ("pca.sif_a=-1", "pca.sif_a = -1 should be > 0"),
    ("refine.max_failures=-7", "refine.max_failures = -7 should be >= -1"),
    ("refine.lr=nan", "refine.lr = nan should be a finite number"),
    ("refine.tau=inf", "refine.tau = inf should be a finite number"),
    ("sentences.max_tokens=3.5", "sentences.max_tokens = 3.5 should be int"),
    ("pca.abtt=1", "pca.abtt = 1 should be bool"),
    ("seed=-1", "seed = -1 should be >= 0"),
    ("languages=[]", "languages = [] should not be empty"),
    ("languages=['en', 'en']", "languages = ['en', 'en'] names a language twice"),
    ("vocab.size=99999999999999999999999", "should fit in 64 bits"),
    ("vocab=1", "[vocab] must be a table"),
    ("refine.objective.x=1", "refine.objective = {'x': 1} should be str"),
])
def test_nonsense_values_are_refused_naming_the_key(item, needle):
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, [item], output="o", check_paths=False)
    assert needle in str(e.value), str(e.value)


def _toml(value) -> str:
    """``value`` as a ``--set`` value (TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        import json

        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


KEYS = [k.replace("<lang>", "en") for k, *_ in describe() if not k.startswith("pairs.")
        and k not in ("output", "teacher", "languages")]
VALUES = st.one_of(st.integers(-10**12, 10**12), st.floats(), st.booleans(),
                   st.text(max_size=12), st.lists(st.one_of(st.integers(), st.text(max_size=4)),
                                                  max_size=3))


def _field(key: str):
    """The dataclass field that ``key`` (``corpus.en.max_lines``) sets."""
    parts = key.split(".")
    obj = load_config(QUICK, output="o", check_paths=False)
    for part in parts[:-1]:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return next(f for f in dataclasses.fields(obj) if f.name == parts[-1])


@settings(max_examples=120, deadline=None)
@given(key=st.sampled_from(KEYS), value=VALUES)
def test_any_value_is_accepted_as_declared_or_refused_in_one_line_naming_the_key(key, value):
    try:
        cfg = load_config(QUICK, [f"{key}={_toml(value)}"], output="o", check_paths=False)
    except ConfigError as e:
        lines = str(e).split("\n")
        count = int(lines[0].split(" ", 1)[0])
        assert len(lines) == count + 1 and all(x.startswith("- ") for x in lines[1:]), str(e)
        assert key.rsplit(".", 1)[-1] in str(e), (key, str(e))
        return
    f = _field(key)
    got = cfg
    for part in key.split("."):
        got = got[part] if isinstance(got, dict) else getattr(got, part)
    assert field_problem(f, got) is None, (key, got)


def test_keys_table_in_the_docs_is_generated_from_the_declarations():
    """docs/reliability.md holds ``python -m swe.build --markdown`` verbatim."""
    doc = (Path(__file__).parents[1] / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert markdown_table() in doc, "regenerate: python -m swe.build --markdown"


@pytest.mark.parametrize("junk", [b'{"config_hash": "ab', b"\xff\xfe", b"[1, 2]", b""])
def test_a_marker_cut_short_by_a_kill_reruns_its_work_instead_of_crashing(tmp_path, junk):
    """A ``_DONE.json`` or shard marker left truncated by a killed write: the stage (or shard)
    counts as not done, and the stage's folder is cleared before it reruns."""
    from swe.build.markers import StageDir

    st = StageDir(str(tmp_path), "vocab", "hash1")
    st.mark_shard("s1", {"lines": 3})
    (tmp_path / "work" / "vocab" / "_DONE.json").write_bytes(junk)
    (tmp_path / "work" / "vocab" / "_shards" / "s2.json").write_bytes(junk)
    assert st.done_stats() is None and st.shard_done("s2") is None
    assert st.shard_done("s1") == {"config_hash": "hash1", "lines": 3}
    st.clear_if_stale()
    assert not (tmp_path / "work" / "vocab").exists()
