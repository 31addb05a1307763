"""The teacher room: the teacher model (:mod:`.model`), its runtimes (:mod:`.runtime`), the
extraction actor that runs it (:mod:`.extractor`) and the teacher-output store (:mod:`.store`,
:mod:`.store_lookup`). The model's public names are re-exported here."""

from swe.build.teacher.model import (
    FastTokenizer,
    Teacher,
    TeacherSpec,
    hidden_size,
    length_groups,
    minilm_dir,
    read_spec,
    teacher_dir,
)

__all__ = ["FastTokenizer", "Teacher", "TeacherSpec", "hidden_size", "length_groups",
           "minilm_dir", "read_spec", "teacher_dir"]
