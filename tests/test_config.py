import pytest

from swe.build.config import ConfigError, load_config

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


def test_refine_and_pairs_validation():
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, ["refine.objective='magic'", "refine.batch_size=1", "refine.lr=0",
                            "refine.min_sentences=2"], output="o")
    msg = str(e.value)
    for needle in ["refine.objective = 'magic'", "refine.batch_size = 1 should be >= 2",
                   "refine.lr = 0 should be > 0", "min_sentences = 2 < train_per_word"]:
        assert needle in msg, (needle, msg)
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, ["refine.lr_schedule='cosine'", "refine.teacher_weight=-1"],
                        output="o")
    msg = str(e.value)
    for needle in ["refine.lr_schedule = 'cosine'", "refine.teacher_weight = -1 should be >= 0"]:
        assert needle in msg, (needle, msg)
    with pytest.raises(ConfigError, match=r"refine\.teacher_weight is for refine\.objective"):
        load_config(QUICK, ["refine.objective='contrastive'", "refine.teacher_weight=0.5"],
                    output="o")
    with pytest.raises(ConfigError, match=r"refine\.kd_weight is for refine\.objective"):
        load_config(QUICK, ["refine.objective='distill'", "refine.kd_weight=0.5"], output="o")
    with pytest.raises(ConfigError, match=r"trains on translation pairs: add \[pairs"):
        load_config(QUICK, ["refine.objective='contrastive'"], output="o")
    with pytest.raises(ConfigError) as e:
        load_config(QUICK, ["pairs.en-fr.paths=['/nope/p.tsv']", "pairs.de.paths=['x']"],
                    output="o")
    msg = str(e.value)
    assert "[pairs.en-fr]: both languages must be in languages" in msg
    assert "pairs.en-fr: cannot read /nope/p.tsv" in msg
    assert "[pairs.de]: name a pair as SRC-TGT" in msg
    with pytest.raises(ConfigError, match=r"needs extraction\.mode = 'sentence'"):
        load_config(QUICK, ["refine.objective='distill'", "extraction.mode='model2vec'"],
                    output="o")


@pytest.mark.parametrize("name", ["en-de", "en-zh", "en-ja", "multilingual", "en-de-kd"])
def test_crosslingual_configs_parse(name):
    # the e5 teacher dir is made by a tool, not installed: parse with the MiniLM teacher
    cfg = load_config(f"pipelines/configs/{name}.toml", ["teacher='minilm'"], check_paths=False)
    assert cfg.refine.objective in ("contrastive", "kd") and cfg.pairs
    assert all(lang in cfg.languages for key in cfg.pairs for lang in key.split("-"))


def test_mpnet_config_parses():
    # the mpnet teacher dir is joined from PyPI parts, not installed: parse with MiniLM
    cfg = load_config("pipelines/configs/en-mpnet.toml", ["teacher='minilm'"], output="o",
                      check_paths=False)
    assert cfg.refine.objective == "distill" and cfg.extraction.runtime == "onnx-int8"
