"""What every stage of one build shares: the config, resolved paths, and saving model steps."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from swe import storage
from swe.lease import Lease, use_lease
from swe.model import StaticModel

if TYPE_CHECKING:
    from swe.build.config import BuildConfig
    from swe.build.teacher.store import Namespace

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """One build's config, absolute output and teacher paths (Ray Train workers do not run in
    the driver's directory)."""

    cfg: BuildConfig
    output: str
    teacher: str
    lease: Lease | None = None
    runtime: dict | None = None  # the prepared ONNX form of the teacher (swe.build.teacher.runtime)
    store: Namespace | None = None  # the teacher-output store's namespace (swe.build.teacher.store)
    store_use: Lease | None = None  # this build's use of it: prune refuses a namespace in use

    @classmethod
    def open(cls, cfg: BuildConfig) -> BuildContext:
        """Resolve paths, check the output is writable (now, not after an hour), take the
        output's lease (a second build into it stops here, naming the holder), start Ray."""
        from swe.build.teacher.runtime import prepare
        from swe.raysetup import init_ray

        out = storage.output_url(cfg.output)
        work = storage.join(out, "work")
        made = [p for p in (out, work) if storage.is_local(p) and not os.path.exists(
            storage.filesystem(p)[1])]  # the write probe's folders, removed if the build stops
        storage.check_writable(work)
        lease = use = None
        try:
            lease = Lease(out, purpose=f"build {cfg.name}").acquire()
            teacher = storage.absolute(cfg.teacher_dir())
            ex = getattr(cfg, "extraction", None)  # a registry without the teacher's stage
            runtime = ex and prepare(teacher, ex.runtime, trust_remote_code=cfg.trust_remote_code)
            store = _store(cfg, teacher) if ex and ex.store else None
            use = store and use_lease(store.url, f"build {cfg.name} into {out}")
            init_ray()
            return cls(cfg, out, teacher, lease, runtime, store, use)
        except BaseException:
            for held in (use, lease):
                if held is not None:
                    held.release()
            for folder in reversed(made):  # empty: another run's output, or no output at all
                with contextlib.suppress(OSError):
                    os.rmdir(storage.filesystem(folder)[1])
            raise

    def onnx_model(self) -> Any:
        """A Ray object reference to the teacher's ONNX model bytes (put once per build), or
        None with the torch runtime: actors load the model from the object store."""
        if self.runtime is None:
            return None
        import ray

        # Keyed by the Ray session too: a reference from an earlier ray.init (another cluster
        # in this process) names an object its owner no longer has.
        return _shipped(self.runtime["path"], self.runtime["sha256"],
                        ray.get_runtime_context().gcs_address)

    def check_lease(self) -> None:
        """Stop (``LeaseLostError``) when another run has taken this build's output over."""
        if self.lease is not None:
            self.lease.check()

    def close(self) -> None:
        """Write the model cards of the steps saved by tasks (step1, step2), give the lease and
        the store's use back (its namespace descriptor written again if a prune removed it)."""
        try:
            self.write_cards()
            if self.store is not None:
                from swe.build.teacher.store import restore_descriptor

                restore_descriptor(self.store)
        finally:
            for held in (self.store_use, self.lease):
                if held is not None:
                    held.release()

    def path(self, *parts: str) -> str:
        """A path under the build's output."""
        return storage.join(self.output, *parts)

    def work(self, stage: str, *parts: str) -> str:
        """A path under another stage's work directory (``<output>/work/<stage>``)."""
        return storage.join(self.output, "work", stage, *parts)

    def provenance(self, step: str) -> dict:
        """What a saved model records about the build that made it."""
        cfg = self.cfg
        return {"step": step, "teacher": cfg.teacher, "build": cfg.name,
                "extraction": cfg.extraction.mode, "vocab_size": cfg.vocab.size,
                "n": cfg.selection.n, "candidates": cfg.selection.candidates,
                "pca": {"level": cfg.pca.level, "dim": cfg.pca.dim, "abtt": cfg.pca.abtt}}

    def save_step(self, step: str, words: list[str], vectors: np.ndarray,
                  publish: bool = True) -> StaticModel:
        """Save ``<output>/<step>`` (and ``<output>/model`` when ``publish``) with provenance."""
        model = StaticModel.from_vectors(words, vectors, tokenizer=self.teacher,
                                         language=self.cfg.languages,
                                         provenance=self.provenance(step), oov=self.cfg.oov)
        model.save(self.path(step))
        if publish:
            model.save(self.path("model"))
        self.write_cards()
        return model

    def write_cards(self) -> None:
        """A README.md model card in every saved model directory (a failure only logs)."""
        from swe.build.card import write_cards

        write_cards(self.output, self.cfg, check=self.check_lease)


@lru_cache(maxsize=2)
def _shipped(path: str, sha256: str, session: str) -> Any:
    """The checked bytes of an ONNX model in Ray's object store (one copy per driver and Ray
    session)."""
    import ray

    from swe.build.teacher.runtime import load_model_bytes

    return ray.put(load_model_bytes({"path": path, "sha256": sha256}))


def _store(cfg: BuildConfig, teacher: str) -> Namespace:
    """The store namespace of this build's teacher, runtime and maximum tokens (opened, and
    checked writable, before any work)."""
    from transformers import AutoConfig, AutoTokenizer

    from swe.build.teacher.runtime import teacher_checksum
    from swe.build.teacher.store import descriptor, open_namespace

    trust = cfg.trust_remote_code
    dim = int(AutoConfig.from_pretrained(teacher, local_files_only=True,
                                         trust_remote_code=trust).hidden_size)
    tok = AutoTokenizer.from_pretrained(teacher, local_files_only=True, trust_remote_code=trust)
    max_tokens = min(512, int(getattr(tok, "model_max_length", 512) or 512))
    return open_namespace(cfg.extraction.store, descriptor(
        teacher_checksum(teacher), cfg.extraction.runtime, max_tokens, dim))
