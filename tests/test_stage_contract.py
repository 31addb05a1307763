"""Each stage owns its contract: no stage imports another, the build config is assembled from
the stage registry, and adding a stage is one module plus one registry entry (a toy stage runs
through the real runner on real Ray)."""

import ast
import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import swe.build.stages as stages_pkg
from swe.build import ConfigError, build, load_config
from swe.build.config import BuildConfig, config_class, markdown_table
from swe.build.stage import Section, StageResult
from swe.build.stages import STAGES

STAGES_DIR = Path(stages_pkg.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports (at any depth: also imports inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against swe.build.stages
                base = "swe.build.stages" + (f".{base}" if base else "")
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def test_no_stage_imports_another_stage():
    offenders = {}
    for path in sorted(STAGES_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        bad = {m for m in _imports(path)
               if m == "swe.build.stages" or m.startswith("swe.build.stages.")}
        if bad:
            offenders[path.name] = sorted(bad)
    assert not offenders, f"stages importing stages (read outputs via swe.build.outputs): " \
                          f"{offenders}"


def test_the_import_check_sees_a_stage_import(tmp_path):
    """The check above is not vacuous: it finds direct, relative and function-level imports."""
    src = tmp_path / "x.py"
    src.write_text("from swe.build.stages.vocab import a\nfrom . import pca\n"
                   "def f():\n    import swe.build.stages.refine\n")
    found = _imports(src)
    assert {"swe.build.stages.vocab", "swe.build.stages.pca", "swe.build.stages.refine"} <= found


def test_build_config_is_the_registry_s_sections_in_stage_order():
    sections = [s.SECTION.name for s in STAGES if s.SECTION is not None]
    names = [f.name for f in dataclasses.fields(BuildConfig)]
    assert names[-len(sections):] == sections
    assert config_class(STAGES) is BuildConfig
    keys = {row.split(" | ")[0].lstrip("| ") for row in markdown_table().splitlines()[2:]}
    for s in STAGES:
        if s.SECTION is not None:
            prefix = s.SECTION.keyed or s.SECTION.name
            assert any(k.startswith(prefix + ".") for k in keys), s.NAME


# -- a toy stage: one module, one registry entry ------------------------------------------------

@dataclass
class ToyConfig:
    count: int = field(default=4, metadata={"min": 1, "help": "numbers to square"})


@dataclass(frozen=True, kw_only=True)
class ToyResult(StageResult):
    total: int


def _toy_stage(calls: list[int]) -> types.ModuleType:
    """A stage module made at run time: it squares ``toy.count`` numbers in Ray tasks."""
    mod = types.ModuleType("toy")
    mod.NAME = "toy"
    mod.Result = ToyResult
    mod.SECTION = Section("toy", ToyConfig)

    def validate(cfg, errors, check_paths):
        if cfg.toy.count == 13:
            errors.append("toy.count = 13 is unlucky; choose another")

    def run(ctx, st, done):
        import ray

        calls.append(ctx.cfg.toy.count)
        square = ray.remote(lambda i: i * i)
        return ToyResult(total=sum(ray.get([square.remote(i) for i in range(ctx.cfg.toy.count)])))

    mod.validate = validate
    mod.enabled = lambda cfg: True
    mod.needs = lambda cfg: ()
    mod.hash_fields = lambda cfg, teacher: (cfg.toy,)
    mod.run = run
    return mod


@pytest.mark.usefixtures("ray_session")
def test_a_toy_stage_runs_through_the_runner(tmp_path):
    calls: list[int] = []
    registry = (_toy_stage(calls),)
    out = str(tmp_path / "toy-build")

    with pytest.raises(ConfigError) as e:
        load_config(None, ["toy.count=0", "toy.bogus=1", "vocab.size=5"], output=out,
                    stages=registry)
    text = str(e.value)
    assert "toy.count = 0 should be >= 1" in text and "unknown key toy.bogus" in text
    assert "unknown key 'vocab'" in text  # the toy registry has no vocab stage
    with pytest.raises(ConfigError, match="unlucky"):
        load_config(None, ["toy.count=13"], output=out, stages=registry)

    cfg = load_config(None, ["toy.count=5"], output=out, stages=registry)
    assert not hasattr(cfg, "vocab") and cfg.toy == ToyConfig(count=5)
    assert build(cfg, stages=registry)["toy"].total == 0 + 1 + 4 + 9 + 16
    assert (tmp_path / "toy-build/work/toy/_DONE.json").is_file()
    assert build(cfg, stages=registry)["toy"].total == 30 and calls == [5]  # reused
    cfg = load_config(None, ["toy.count=3"], output=out, stages=registry)
    assert build(cfg, stages=registry)["toy"].total == 5 and calls == [5, 3]  # config changed
