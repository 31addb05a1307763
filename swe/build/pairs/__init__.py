"""The pairs room: translation-pair sources and their config (:mod:`.sources`), the readers
that stream them (:mod:`.readers`), text normalisation and pair hashing (:mod:`.text`), the
deduplicated, shuffled pair dataset (:mod:`.dataset`) and its train/dev splits (:mod:`.splits`).
No Ray at import time."""
