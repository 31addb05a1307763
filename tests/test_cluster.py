"""The build on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a
head with no CPUs and three worker nodes of two CPUs each): tasks spread over the nodes, the model
equals the single-node model (built on the first node before the others join) bit for bit, and a
node removed in the middle of extraction does not change it (one build shows all three).

Marked ``own_ray_cluster``: conftest runs these before the session's in-process Ray starts.
"""

from __future__ import annotations

import json
import lzma
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from swe import StaticModel
from swe.build import build, load_config

pytestmark = pytest.mark.own_ray_cluster

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=4",
         "selection.candidates=40", "selection.partitions=3", "extraction.partitions=2",
         "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2400", "corpus.en.shard_lines=400",
         "extraction.batch_size=64", "extraction.job_sentences=300", "extraction.actors=2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_dir) -> Path:
    path = tmp_path_factory.mktemp("cluster-corpus") / "en.txt"
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.03.txt.xz", "rt") as f:
        path.write_text("".join(next(f) for _ in range(2400)))
    return path


def _args(corpus: Path) -> list[str]:
    return [*SMALL, f"corpus.en.paths=['{corpus}']"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, corpus, no_session_ray):
    """A head that runs nothing and one two-CPU worker node, on which the reference build runs
    (single node); then two more such nodes join. This process is the driver. (With one CPU
    per node, two half-CPU actors on two nodes leave no node a whole CPU for Ray Data's read
    tasks once the third node is gone: a scheduling deadlock, not a build bug.)"""
    import ray
    from ray.cluster_utils import Cluster
    from ray.data import DataContext

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [c.add_node(num_cpus=2, object_store_memory=200 << 20)]
    ray.init(address=c.address)
    DataContext.get_current().execution_no_progress_timeout_s = 300
    single = tmp_path_factory.mktemp("single") / "build"
    build(load_config("pipelines/configs/quickstart.toml", _args(corpus), output=str(single)))
    assert len(_nodes(single)) == 1, "the reference build ran on more than one node"
    nodes += [c.add_node(num_cpus=2, object_store_memory=200 << 20) for _ in range(2)]
    c.wait_for_nodes()
    yield c, nodes, single
    ray.shutdown()
    c.shutdown()


def _nodes(out: Path) -> set[str]:
    """The nodes recorded by the build's per-task markers."""
    found = set()
    for marker in (out / "work").glob("*/_shards/*.json"):
        node = json.loads(marker.read_text()).get("node")
        if node:
            found.add(node)
    return found


def _same_model(a: Path, b: Path) -> None:
    ma, mb = StaticModel.load(a / "model"), StaticModel.load(b / "model")
    assert ma.words == mb.words
    assert np.array_equal(ma.vectors, mb.vectors)  # exact: fixed-point sums, seeded draws


def test_build_spreads_over_nodes_survives_a_node_removed_and_equals_single_node(
        cluster, tmp_path, corpus):
    """One build covers both: its tasks run on several nodes, and a node removed once
    extraction writes changes nothing."""
    c, nodes, single_node = cluster
    out = tmp_path / "build"
    removed: list[bool] = []

    def remove_a_node_when_extraction_writes():
        deadline = time.time() + 300
        while time.time() < deadline:
            if list((out / "work" / "extraction" / "sums").rglob("*.npz")):
                c.remove_node(nodes[2])
                removed.append(True)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=remove_a_node_when_extraction_writes)
    killer.start()
    build(load_config("pipelines/configs/quickstart.toml", _args(corpus), output=str(out)))
    killer.join()
    assert removed, "extraction never started writing"
    assert len(_nodes(out)) >= 2, "every task ran on one node"
    _same_model(out, single_node)
