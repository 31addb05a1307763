import pytest

from swe.config import ConfigError, load_config

QUICK = "pipelines/configs/quickstart.toml"


def test_quickstart_and_en_configs_are_valid():
    cfg = load_config(QUICK, output="out/x")
    assert cfg.vocab.size == 3000 and cfg.languages == ["en"]
    en = load_config("pipelines/configs/en.toml", output="out/en")
    assert (en.vocab.size, en.selection.n, en.selection.candidates, en.pca.dim) == (
        150_000, 100, 2000, 256)


def test_overrides_are_typed():
    cfg = load_config(QUICK, ["vocab.size=123", "pca.abtt=false", "corpus.en.max_lines=10"],
                      output="o")
    assert cfg.vocab.size == 123 and cfg.pca.abtt is False and cfg.corpus["en"].max_lines == 10


def test_every_problem_is_reported_at_once(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, ["vocab.sise=1", "selection.n=500", "pca.dim=384",
                            "corpus.en.paths=['/nope/x.txt']", "extraction.mode='magic'",
                            "sentences.max_tokens=9000", "vocab.size='many'"], output="o")
    msg = str(e.value)
    for needle in ["unknown key vocab.sise", "selection.n = 500 > selection.candidates = 200",
                   "exceeds the teacher's 384 dimensions", "cannot read /nope/x.txt",
                   "extraction.mode = 'magic'", "max_tokens = 9000",
                   "vocab.size = 'many' should be int"]:
        assert needle in msg, (needle, msg)


def test_missing_teacher_language_output_and_file(tmp_path):
    with pytest.raises(ConfigError, match="teacher not found"):
        load_config(QUICK, [f"teacher='{tmp_path}/none'"], output="o")
    with pytest.raises(ConfigError, match="unknown language"):
        load_config(QUICK, ["languages=['xx']"], output="o")
    with pytest.raises(ConfigError, match="no output"):
        load_config(QUICK, ["output=''"])
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(QUICK, ["vocab.size"], output="o")
