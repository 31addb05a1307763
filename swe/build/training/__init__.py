"""The training room: the Ray Train loop (:mod:`.trainer`), its row-sparse Adam
(:mod:`.row_adam`) and the losses (:mod:`.losses`)."""
